package server_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the "proto" codec
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// One authenticated unary call through the server's whole chain: in-process against over bufconn
// (the same server, the same handler).
//
//	cd platform && go test -run - -bench BenchmarkUnaryCall -benchmem ./server/
func BenchmarkUnaryCall(b *testing.B) {
	srv, wire, _ := startInproc(b)
	req := &registryv1.GetLockRequest{Resource: "services/registry/lock.go"}
	for _, c := range []struct {
		name string
		conn grpc.ClientConnInterface
		ctx  context.Context
	}{
		{"inprocess", srv.InProcess("tok-ops", nil), context.Background()},
		{"bufconn", wire, withToken(context.Background(), "tok-ops")},
	} {
		client := registryv1.NewRegistryServiceClient(c.conn)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.GetLock(c.ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// How an in-process call copies a message: through the codec (marshal, then unmarshal: what
// InProcess does, as the wire would) against proto.Clone, on a small request and on a task list.
func BenchmarkMessageCopy(b *testing.B) {
	spec := &schedulerv1.TaskListSpec{Name: "copy"}
	for i := range 20 {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: fmt.Sprint(i), Title: "a task title of some length", Command: "true",
			Action: commonv1.TaskAction_TASK_ACTION_RUN, File: fmt.Sprintf("out/%04d", i), DependsOn: []string{"1", "2"}})
	}
	codec := encoding.GetCodecV2("proto")
	for _, m := range []struct {
		name string
		msg  proto.Message
	}{{"lock", validLock()}, {"tasklist20", &schedulerv1.CreateTaskListRequest{Spec: spec}}} {
		b.Run(m.name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := codec.Marshal(m.msg)
				require.NoError(b, err)
				out := m.msg.ProtoReflect().New().Interface()
				require.NoError(b, codec.Unmarshal(data, out))
				data.Free()
			}
		})
		b.Run(m.name+"/marshal+merge", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := codec.Marshal(m.msg)
				require.NoError(b, err)
				out := m.msg.ProtoReflect().New().Interface()
				proto.Merge(out, m.msg)
				data.Free()
			}
		})
		b.Run(m.name+"/clone", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = proto.Clone(m.msg)
			}
		})
	}
}
