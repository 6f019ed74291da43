package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/registry"
)

func acquireAll(holder string, ttl, wait time.Duration, resources ...string) *registryv1.AcquireLocksRequest {
	req := &registryv1.AcquireLocksRequest{Resources: resources, Holder: holder, Ttl: durationpb.New(ttl)}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return req
}

func grantsOf(locks []*registryv1.Lock) []*registryv1.LockGrant {
	out := make([]*registryv1.LockGrant, len(locks))
	for i, l := range locks {
		out[i] = &registryv1.LockGrant{Resource: l.GetResource(), Token: l.GetToken()}
	}
	return out
}

// TestBatchLockLifecycle: AcquireLocks grants a task's files all or nothing, ReleaseLocks frees
// the current grants and names the others, on every backend, through the real server.
func TestBatchLockLifecycle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		files := []string{"server/routes/habits.ts", "server/db.ts", "client/app.ts"}

		res, err := c.AcquireLocks(ctx, acquireAll("agent-1", time.Minute, 0, files...))
		require.NoError(t, err)
		require.True(t, res.GetGranted())
		require.Nil(t, res.GetConflict())
		require.Len(t, res.GetLocks(), 3)
		for i, l := range res.GetLocks() {
			require.Equal(t, files[i], l.GetResource())
			require.Equal(t, "agent-1", l.GetHolder())
			require.Positive(t, l.GetToken())
			got, err := c.GetLock(ctx, &registryv1.GetLockRequest{Resource: files[i]})
			require.NoError(t, err)
			require.Equal(t, l.GetToken(), got.GetLock().GetToken())
		}
		mine := res.GetLocks()

		// A batch that overlaps on one file takes nothing.
		res, err = c.AcquireLocks(ctx, acquireAll("agent-2", time.Minute, 0, "docs/a.md", "server/db.ts"))
		require.NoError(t, err)
		require.False(t, res.GetGranted())
		require.Empty(t, res.GetLocks())
		require.Equal(t, "server/db.ts", res.GetConflict().GetResource())
		require.Equal(t, "agent-1", res.GetConflict().GetHolder())
		require.Zero(t, res.GetConflict().GetToken(), "the token is withheld")
		_, err = c.GetLock(ctx, &registryv1.GetLockRequest{Resource: "docs/a.md"})
		requireCode(t, codes.NotFound, err)

		// A batch waits for the files to be free together.
		done := make(chan *registryv1.AcquireLocksResponse, 1)
		go func() {
			r, err := c.AcquireLocks(ctx, acquireAll("agent-2", time.Minute, time.Minute, "docs/a.md", "server/db.ts"))
			if err != nil {
				r = &registryv1.AcquireLocksResponse{Conflict: &registryv1.Lock{Holder: err.Error()}}
			}
			done <- r
		}()

		// Release: one grant with a token never granted, one the holder no longer holds.
		_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: files[2], Holder: "agent-1", Token: mine[2].GetToken()})
		require.NoError(t, err)
		grants := grantsOf(mine)
		grants[0].Token += 1000
		rel, err := c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-1", Locks: grants})
		require.NoError(t, err)
		require.EqualValues(t, 1, rel.GetReleased())
		require.Len(t, rel.GetNotReleased(), 2)
		require.Equal(t, files[0], rel.GetNotReleased()[0].GetResource())
		require.Equal(t, registryv1.ReleaseRefusal_RELEASE_REFUSAL_WRONG_TOKEN, rel.GetNotReleased()[0].GetReason())
		require.Equal(t, files[2], rel.GetNotReleased()[1].GetResource())
		require.Equal(t, registryv1.ReleaseRefusal_RELEASE_REFUSAL_NOT_HELD, rel.GetNotReleased()[1].GetReason())
		require.Contains(t, rel.GetNotReleased()[1].GetMessage(), "not held")

		got := <-done
		require.True(t, got.GetGranted(), "woken by the batch release of server/db.ts: %v", got)
		require.Greater(t, got.GetLocks()[1].GetToken(), mine[1].GetToken(), "tokens increase per resource")

		// agent-1's db.ts token is stale now.
		rel, err = c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-1", Locks: grantsOf(mine[1:2])})
		require.NoError(t, err)
		require.Equal(t, registryv1.ReleaseRefusal_RELEASE_REFUSAL_STALE_TOKEN, rel.GetNotReleased()[0].GetReason())
		rel, err = c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-3", Locks: grantsOf(got.GetLocks())})
		require.NoError(t, err)
		require.Equal(t, registryv1.ReleaseRefusal_RELEASE_REFUSAL_HELD_BY_OTHER, rel.GetNotReleased()[0].GetReason())
		rel, err = c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-2", Locks: grantsOf(got.GetLocks())})
		require.NoError(t, err)
		require.EqualValues(t, 2, rel.GetReleased())
		require.Empty(t, rel.GetNotReleased())
	})
}

// TestBatchLockValidation: bad batches are InvalidArgument with a field violation, through the
// interceptor (protovalidate) and in the handler itself.
func TestBatchLockValidation(t *testing.T) {
	t.Parallel()
	b := backends[1]
	c := setup(t, b).client
	srv := registry.New(b.open(t).store, b.open(t).hot)
	ctx := t.Context()
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("f/%d.go", i)
	}
	cases := []struct {
		name  string
		req   *registryv1.AcquireLocksRequest
		field string
	}{
		{"empty", acquireAll("agent-1", time.Minute, 0), "resources"},
		{"too many", acquireAll("agent-1", time.Minute, 0, many...), "resources"},
		{"duplicate", acquireAll("agent-1", time.Minute, 0, "a.go", "a.go"), "resources"},
		{"NUL", acquireAll("agent-1", time.Minute, 0, "a.go", "b\x00.go"), "resources[1]"},
		{"absolute", acquireAll("agent-1", time.Minute, 0, "/etc/passwd"), "resources[0]"},
		{"dot-dot", acquireAll("agent-1", time.Minute, 0, "a/../../b"), "resources[0]"},
		{"git", acquireAll("agent-1", time.Minute, 0, "x/.git/config"), "resources[0]"},
		{"no ttl", &registryv1.AcquireLocksRequest{Resources: []string{"a.go"}, Holder: "agent-1"}, "ttl"},
		{"bad holder", acquireAll("", time.Minute, 0, "a.go"), "holder"},
	}
	for _, tc := range cases {
		_, err := c.AcquireLocks(ctx, tc.req)
		requireInvalid(t, err, tc.field)
		if tc.name != "bad holder" && tc.name != "NUL" {
			_, err = srv.AcquireLocks(ctx, tc.req)
			requireCode(t, codes.InvalidArgument, err)
		}
	}
	_, err := c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-1", Locks: []*registryv1.LockGrant{{Resource: "a.go", Token: 1}, {Resource: "a.go", Token: 2}}})
	requireInvalid(t, err, "locks")
	_, err = srv.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-1", Locks: []*registryv1.LockGrant{{Resource: "a.go", Token: 1}, {Resource: "a.go", Token: 2}}})
	requireInvalid(t, err, "locks[1].resource")
	_, err = c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-1", Locks: []*registryv1.LockGrant{{Resource: "a\x00.go", Token: 1}}})
	requireInvalid(t, err, "locks[0].resource")
	_, err = c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-1", Locks: []*registryv1.LockGrant{{Resource: "a.go"}}})
	requireInvalid(t, err, "locks[0].token")
	_, err = c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "agent-1"})
	requireInvalid(t, err, "locks")
}

// TestBatchLockHolderBinding: a principal takes and releases batches only as an instance it
// registered, like AcquireLock.
func TestBatchLockHolderBinding(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		srv := registry.New(e.store, e.hot)
		as := func(name string) context.Context {
			return auth.NewContext(t.Context(), auth.Principal{Name: name, Roles: []auth.Role{auth.RoleAgent}})
		}
		_, err := srv.RegisterAgent(as("pool-a"), &registryv1.RegisterAgentRequest{InstanceId: "inst-a", SessionId: "s1"})
		require.NoError(t, err)
		_, err = srv.AcquireLocks(as("pool-b"), acquireAll("inst-a", time.Minute, 0, "a.go", "b.go"))
		requireCode(t, codes.PermissionDenied, err)
		_, err = srv.AcquireLocks(as("pool-b"), acquireAll("nobody", time.Minute, 0, "a.go"))
		requireCode(t, codes.PermissionDenied, err)
		res, err := srv.AcquireLocks(as("pool-a"), acquireAll("inst-a", time.Minute, 0, "a.go", "b.go"))
		require.NoError(t, err)
		require.True(t, res.GetGranted())
		_, err = srv.ReleaseLocks(as("pool-b"), &registryv1.ReleaseLocksRequest{Holder: "inst-a", Locks: grantsOf(res.GetLocks())})
		requireCode(t, codes.PermissionDenied, err)
		rel, err := srv.ReleaseLocks(as("pool-a"), &registryv1.ReleaseLocksRequest{Holder: "inst-a", Locks: grantsOf(res.GetLocks())})
		require.NoError(t, err)
		require.EqualValues(t, 2, rel.GetReleased())
	})
}
