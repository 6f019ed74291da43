package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

// fakeLocks answers RenewLock with renewErr, and AcquireLock with a grant (token 99) or the
// lock held by holder.
type fakeLocks struct {
	registryv1.RegistryServiceClient
	renewErr error
	holder   string // "" = AcquireLock grants
	renewed  []int64
}

func (f *fakeLocks) RenewLock(_ context.Context, req *registryv1.RenewLockRequest, _ ...grpc.CallOption) (*registryv1.RenewLockResponse, error) {
	f.renewed = append(f.renewed, req.GetToken())
	if f.renewErr != nil {
		return nil, f.renewErr
	}
	return &registryv1.RenewLockResponse{Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: req.GetHolder(), Token: req.GetToken()}}, nil
}

func (f *fakeLocks) AcquireLock(_ context.Context, req *registryv1.AcquireLockRequest, _ ...grpc.CallOption) (*registryv1.AcquireLockResponse, error) {
	if f.holder != "" {
		return &registryv1.AcquireLockResponse{Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: f.holder}}, nil
	}
	return &registryv1.AcquireLockResponse{Granted: true, Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: req.GetHolder(), Token: 99}}, nil
}

// The keeper renews the file locks with their tokens: a current token is renewed; a lapsed lock
// nobody took is taken again with a new token; a stale token (granted to another since) or a
// lock held by another is lost, and stays lost; an unreachable Registry is no answer.
func TestRenewLocks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		renewErr  error
		holder    string
		lost      bool
		wantToken int64
	}{
		{name: "current", wantToken: 7},
		{name: "lapsed and free", renewErr: status.Error(codes.FailedPrecondition, "not held"), wantToken: 99},
		{name: "lapsed and taken", renewErr: status.Error(codes.FailedPrecondition, "not held"), holder: "agent-2", lost: true, wantToken: 7},
		{name: "stale token", renewErr: status.Error(codes.Aborted, "stale"), lost: true, wantToken: 7},
		{name: "registry unreachable", renewErr: status.Error(codes.Unavailable, "down"), wantToken: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := &fakeLocks{renewErr: tc.renewErr, holder: tc.holder}
			w, err := New(Config{Scheduler: nil, Registry: reg, DataDir: t.TempDir(), InstanceID: "agent-1", StandAlone: true})
			require.NoError(t, err)
			l := &lease{w: w}
			l.setLocks([]heldLock{{resource: "ex/out/a.txt", token: 7}}, time.Second)
			err = l.renewLocks(context.Background())
			if tc.lost {
				require.Error(t, err)
				require.Error(t, l.renewLocks(context.Background()), "a lost lock stays lost")
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantToken, l.heldLocks()[0].token)
			require.Equal(t, int64(7), reg.renewed[0], "renewed with its token")
		})
	}
}
