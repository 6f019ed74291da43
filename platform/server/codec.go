package server

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// requestCodec is grpc-go's protobuf codec except for requests that do not decode.
//
// grpc-go answers Internal ("failed to unmarshal the received message") for a request that is not
// valid protobuf for the method: a string field holding invalid UTF-8 (which the Go client refuses
// to send but other clients do), a message nested deeper than the decoder's recursion limit (a
// google.protobuf.Struct 10,000 levels deep), a truncated field. That is the client's mistake, not
// a bug, so it must be InvalidArgument (DESIGN §3). The codec is the only place that sees the
// error, and grpc-go wraps whatever it returns as Internal, so on a decoding error it answers an
// empty message marked as malformed (an unknown field, malformedField, holding the field path and
// why) and the validation interceptor, which runs before every handler and on every message a
// stream receives, turns the mark into InvalidArgument with a field violation.
type requestCodec struct {
	encoding.CodecV2 // grpc-go's "proto" codec, for marshalling and for requests that decode
}

// malformedField is the field number of the mark: the largest allowed, which no converge message
// uses. A client that sends it itself only earns the same InvalidArgument.
const malformedField protowire.Number = protowire.MaxValidNumber

func newRequestCodec() encoding.CodecV2 {
	return requestCodec{CodecV2: encoding.GetCodecV2("proto")}
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m := messageOf(v)
	if m == nil {
		return err
	}
	buf := data.Materialize()
	field, why := locateMalformed(buf, m.ProtoReflect().Descriptor(), "", 0)
	if why == "" {
		why = err.Error()
	}
	if len(field) > maxFieldPathLen {
		field = field[:maxFieldPathLen] + "…"
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, malformedField, protowire.BytesType)
	mark = protowire.AppendString(mark, field+"\x00"+why)
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV2:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}

// malformed answers the InvalidArgument for a message the codec marked, or nil.
func malformed(m proto.Message) error {
	unknown := m.ProtoReflect().GetUnknown()
	for len(unknown) > 0 {
		num, typ, n := protowire.ConsumeTag(unknown)
		if n < 0 {
			return nil
		}
		unknown = unknown[n:]
		if num == malformedField && typ == protowire.BytesType {
			mark, n := protowire.ConsumeString(unknown)
			if n < 0 {
				return nil
			}
			field, why := mark, ""
			for i := 0; i < len(mark); i++ {
				if mark[i] == 0 {
					field, why = mark[:i], mark[i+1:]
					break
				}
			}
			if why == "" {
				why = "not a valid protobuf encoding"
			}
			name := m.ProtoReflect().Descriptor().Name()
			msg := fmt.Sprintf("invalid %s: the request does not decode: %s", name, why)
			if field != "" {
				msg = fmt.Sprintf("invalid %s: %s: %s", name, field, why)
			}
			return grpcerr.InvalidArgument(msg, grpcerr.FieldViolation{Field: field, Description: why})
		}
		n = protowire.ConsumeFieldValue(num, typ, unknown)
		if n < 0 {
			return nil
		}
		unknown = unknown[n:]
	}
	return nil
}

// maxFieldPathLen bounds the field path of a violation (a path 10,000 messages deep is not read).
const maxFieldPathLen = 256

// maxDecodeDepth is the decoder's default recursion limit (proto.UnmarshalOptions).
const maxDecodeDepth = 10000

// locateMalformed walks the encoded message b of type md and answers the path of the first field
// that does not decode ("spec.tasks[2].title") and why; why is "" when it finds nothing (the
// decoder's own error then says what is wrong).
func locateMalformed(b []byte, md protoreflect.MessageDescriptor, prefix string, depth int) (field, why string) {
	if depth > maxDecodeDepth {
		return prefix, fmt.Sprintf("nested more than %d messages deep", maxDecodeDepth)
	}
	counts := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return prefix, "truncated or invalid field tag"
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		path := prefix
		if fd != nil && len(prefix) <= maxFieldPathLen { // deeper, the path is cut anyway
			path = joinPath(prefix, string(fd.Name()))
			if fd.IsList() || fd.IsMap() {
				path += "[" + strconv.Itoa(counts[num]) + "]"
				counts[num]++
			}
		}
		if typ != protowire.BytesType || fd == nil {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return path, "truncated field value"
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return path, "truncated field value"
		}
		b = b[n:]
		switch {
		case fd.IsMap():
			if f, w := locateMalformed(v, fd.Message(), path, depth+1); w != "" {
				return f, w
			}
		case fd.Kind() == protoreflect.StringKind:
			if !utf8.Valid(v) {
				return path, "must be valid UTF-8"
			}
		case fd.Kind() == protoreflect.MessageKind:
			if f, w := locateMalformed(v, fd.Message(), path, depth+1); w != "" {
				return f, w
			}
		}
	}
	return "", ""
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}
