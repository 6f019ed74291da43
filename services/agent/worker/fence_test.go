package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

// fakeLocks answers RenewLock with renewErr, AcquireLock with a grant (token 99) or the lock
// held by holder, and ReleaseLocks once release is closed (nil: at once), after it closed
// releasing (when set).
type fakeLocks struct {
	registryv1.RegistryServiceClient
	renewErr           error
	holder             string // "" = AcquireLock grants
	releasing, release chan struct{}

	mu       sync.Mutex
	renewed  []int64 // the token of each RenewLock
	acquires int     // AcquireLock calls
	released []int64 // the tokens of the ReleaseLocks calls
}

func (f *fakeLocks) RenewLock(_ context.Context, req *registryv1.RenewLockRequest, _ ...grpc.CallOption) (*registryv1.RenewLockResponse, error) {
	f.mu.Lock()
	f.renewed = append(f.renewed, req.GetToken())
	f.mu.Unlock()
	if f.renewErr != nil {
		return nil, f.renewErr
	}
	return &registryv1.RenewLockResponse{Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: req.GetHolder(), Token: req.GetToken()}}, nil
}

func (f *fakeLocks) AcquireLock(_ context.Context, req *registryv1.AcquireLockRequest, _ ...grpc.CallOption) (*registryv1.AcquireLockResponse, error) {
	f.mu.Lock()
	f.acquires++
	f.mu.Unlock()
	if f.holder != "" {
		return &registryv1.AcquireLockResponse{Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: f.holder}}, nil
	}
	return &registryv1.AcquireLockResponse{Granted: true, Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: req.GetHolder(), Token: 99}}, nil
}

func (f *fakeLocks) ReleaseLocks(ctx context.Context, req *registryv1.ReleaseLocksRequest, _ ...grpc.CallOption) (*registryv1.ReleaseLocksResponse, error) {
	if f.releasing != nil {
		close(f.releasing)
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range req.GetLocks() {
		f.released = append(f.released, l.GetToken())
	}
	return &registryv1.ReleaseLocksResponse{Released: int32(len(req.GetLocks()))}, nil
}

// heldLocks answers the locks the lease holds now, after any renewal round in flight.
func (l *lease) heldLocks() []heldLock {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]heldLock(nil), l.locks...)
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

// The release takes the locks from the lease before it calls the Registry. A keeper round that
// runs while the release is on its way (a Registry whose Redis is restarting answers slowly)
// finds no lock: it neither renews nor takes again the lock being released, which would leave a
// new grant held for a whole lease after the work (the fault suite's redis-flush-restart saw
// it). The release names the token the last round before it stored.
func TestReleaseEndsTheLocksRenewals(t *testing.T) {
	t.Parallel()
	reg := &fakeLocks{renewErr: status.Error(codes.FailedPrecondition, "not held"), releasing: make(chan struct{}), release: make(chan struct{})}
	w, err := New(Config{Scheduler: nil, Registry: reg, DataDir: t.TempDir(), InstanceID: "agent-1", StandAlone: true})
	require.NoError(t, err)
	l := &lease{w: w}
	l.setLocks([]heldLock{{resource: "ex/out/a.txt", token: 7}}, time.Second)
	require.NoError(t, l.renewLocks(context.Background()), "lapsed (Redis flushed) and taken again")

	released := make(chan struct{})
	go func() {
		defer close(released)
		w.unlock(context.Background(), l.takeLocks())
	}()
	<-reg.releasing
	require.NoError(t, l.renewLocks(context.Background()), "a keeper round while the release is at the Registry")
	close(reg.release)
	<-released

	reg.mu.Lock()
	defer reg.mu.Unlock()
	require.Equal(t, 1, reg.acquires, "only the round before the release took the lapsed lock again")
	require.Equal(t, []int64{7}, reg.renewed, "the round during the release renewed nothing")
	require.Equal(t, []int64{99}, reg.released, "released with the token taken again")
	require.Empty(t, l.heldLocks())
}
