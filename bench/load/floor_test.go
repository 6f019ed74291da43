package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// floorServer is a bare grpc-go WatchExecution: no interceptor, no store, no tail; every stream
// sends the same entries, pre-encoded once (prepared) or marshalled per stream.
type floorServer struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	msgs     []*schedulerv1.WatchExecutionResponse
	prepared bool
	once     sync.Once
	pms      []*grpc.PreparedMsg
}

func (f *floorServer) WatchExecution(_ *schedulerv1.WatchExecutionRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchExecutionResponse]) error {
	if !f.prepared {
		for _, m := range f.msgs {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
		return nil
	}
	f.once.Do(func() {
		for _, m := range f.msgs {
			p := &grpc.PreparedMsg{}
			if err := p.Encode(stream, m); err != nil {
				panic(err)
			}
			f.pms = append(f.pms, p)
		}
	})
	for _, p := range f.pms {
		if err := stream.SendMsg(p); err != nil {
			return err
		}
	}
	return nil
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFloor is the least R8's design can cost here: a bare grpc-go server on loopback TCP
// sending M log entries (shaped like a run's: task id, instance, message, time) to S streams over
// C connections, and the client receiving and decoding them, in one process. It reports the
// process's CPU per message (server and client together) and the wall time.
//
//	go test -run '^$' -bench BenchmarkFloor -benchtime 1x .
func BenchmarkFloor(b *testing.B) {
	for _, prepared := range []bool{false, true} {
		for _, streams := range []int{300, 1000} {
			b.Run(fmt.Sprintf("streams=%d/entries=100/prepared=%v", streams, prepared), func(b *testing.B) {
				for range b.N {
					floorRun(b, streams, 4, 100, prepared)
				}
			})
		}
	}
}

func floorRun(b *testing.B, streams, conns, entries int, prepared bool) {
	b.StopTimer()
	f := &floorServer{prepared: prepared}
	now := time.Now()
	for i := range entries {
		f.msgs = append(f.msgs, &schedulerv1.WatchExecutionResponse{Entry: &commonv1.LogEntry{
			Seq: int64(i + 1), ExecutionId: "0197c0de-5eed-7000-8000-000000000001", TaskId: fmt.Sprintf("t%04d", i),
			InstanceId: "agent-07", EventType: commonv1.EventType_EVENT_TYPE_TASK_COMPLETED,
			Message: fmt.Sprintf("task t%04d completed: exit 0 in 12ms", i), Time: timestamppb.New(now)}})
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	schedulerv1.RegisterSchedulerServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cs := make([]*grpc.ClientConn, conns)
	for i := range cs {
		if cs[i], err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			b.Fatal(err)
		}
		defer cs[i].Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	start := make(chan struct{})
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stream, err := schedulerv1.NewSchedulerServiceClient(cs[i%conns]).WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: "x"})
			if err != nil {
				errs <- err
				return
			}
			n := 0
			for {
				_, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				n++
			}
			if n != entries {
				errs <- fmt.Errorf("received %d entries, want %d", n, entries)
			}
		}()
	}
	cpu0, wall0 := cpuNow(), time.Now()
	b.StartTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	cpu, wall := cpuNow()-cpu0, time.Since(wall0)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	msgs := float64(streams * entries)
	b.ReportMetric(float64(cpu.Nanoseconds())/msgs, "cpu-ns/message")
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.StartTimer()
}
