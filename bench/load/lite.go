package main

// The streams' light client: a WatchExecution stream whose messages are read for each entry's
// seq and store time only (protowire), the rest of each entry skipped unparsed. A watcher that
// counts entries or follows progress pays that much; the full decode (every entry's message,
// context Struct and timestamps into the generated types) costs the same 2 cores the run uses, so
// on this machine it measured the client as much as the Scheduler (--decode full keeps it).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Field numbers of the messages the light client reads (converge.scheduler.v1.WatchExecutionResponse,
// converge.common.v1.LogEntry, google.protobuf.Timestamp); TestLiteMatchesTheContract checks them
// against the generated types.
const (
	fieldResponseEntry   protowire.Number = 1 // WatchExecutionResponse.entry
	fieldResponseEntries protowire.Number = 3 // WatchExecutionResponse.entries
	fieldEntrySeq        protowire.Number = 1 // LogEntry.seq
	fieldEntryTime       protowire.Number = 6 // LogEntry.time
	fieldTimeSeconds     protowire.Number = 1 // Timestamp.seconds
	fieldTimeNanos       protowire.Number = 2 // Timestamp.nanos
)

// liteEntry is what the light client keeps of a log entry.
type liteEntry struct {
	seq int64
	at  time.Time
}

// liteMessage is one WatchExecutionResponse as the light client reads it: its entries (entry or
// entries), nothing of an execution snapshot.
type liteMessage struct {
	entries []liteEntry
}

// liteCodec marshals the request as protobuf and reads each response into a liteMessage. Its
// name is "proto", the content subtype the Scheduler serves.
type liteCodec struct{}

func (liteCodec) Name() string { return "proto" }

func (liteCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("lite codec: cannot marshal %T", v)
	}
	return proto.Marshal(m)
}

func (liteCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*liteMessage)
	if !ok {
		return fmt.Errorf("lite codec: cannot unmarshal into %T", v)
	}
	m.entries = m.entries[:0]
	return scanFields(data, func(num protowire.Number, typ protowire.Type, b []byte) error {
		if typ != protowire.BytesType || (num != fieldResponseEntry && num != fieldResponseEntries) {
			return nil
		}
		en, err := scanEntry(b)
		if err != nil {
			return err
		}
		m.entries = append(m.entries, en)
		return nil
	})
}

// scanEntry reads a LogEntry's seq and time.
func scanEntry(b []byte) (liteEntry, error) {
	var en liteEntry
	err := scanFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == fieldEntrySeq && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return protowire.ParseError(n)
			}
			en.seq = int64(x)
		case num == fieldEntryTime && typ == protowire.BytesType:
			var sec, nsec int64
			err := scanFields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if typ != protowire.VarintType {
					return nil
				}
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return protowire.ParseError(n)
				}
				switch num {
				case fieldTimeSeconds:
					sec = int64(x)
				case fieldTimeNanos:
					nsec = int64(int32(x))
				}
				return nil
			})
			if err != nil {
				return err
			}
			en.at = time.Unix(sec, nsec)
		}
		return nil
	})
	return en, err
}

// scanFields calls fn with each field of the message b: its number, wire type and value (for a
// varint its encoding, for bytes the content), or the wire's error.
func scanFields(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			content, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v, n = content, m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			v = b[:n]
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// watchDesc is WatchExecution's stream in the Scheduler's service description.
func watchDesc() (*grpc.StreamDesc, error) {
	for i, s := range schedulerv1.SchedulerService_ServiceDesc.Streams {
		if s.StreamName == "WatchExecution" {
			return &schedulerv1.SchedulerService_ServiceDesc.Streams[i], nil
		}
	}
	return nil, errors.New("the Scheduler's service description has no WatchExecution stream")
}

// liteWatch opens a WatchExecution stream read by the light client.
func liteWatch(ctx context.Context, cc grpc.ClientConnInterface, req *schedulerv1.WatchExecutionRequest) (grpc.ClientStream, error) {
	desc, err := watchDesc()
	if err != nil {
		return nil, err
	}
	s, err := cc.NewStream(ctx, desc, schedulerv1.SchedulerService_WatchExecution_FullMethodName, grpc.ForceCodec(liteCodec{}))
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(req); err != nil {
		return nil, err
	}
	return s, s.CloseSend()
}
