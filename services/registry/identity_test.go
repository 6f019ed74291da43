package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/registry"
)

// TestLockHolderBindingCached: checkHolder caches an instance's principal after the first lock
// RPC; the cached binding still refuses every other principal, and an instance registered by
// nobody (which a principal may still claim) is not cached: its claimer locks with it at once.
func TestLockHolderBindingCached(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		srv := registry.New(e.store, e.hot)
		as := func(name string) context.Context {
			return auth.NewContext(t.Context(), auth.Principal{Name: name, Roles: []auth.Role{auth.RoleAgent}})
		}
		acquire := func(ctx context.Context, resource, holder string) error {
			_, err := srv.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: resource, Holder: holder, Ttl: durationpb.New(time.Minute)})
			return err
		}
		_, err := srv.RegisterAgent(as("pool-a"), &registryv1.RegisterAgentRequest{InstanceId: "inst-a", SessionId: "s1"})
		require.NoError(t, err)
		for i := range 3 { // the first reads the store, the others the cache
			require.Error(t, acquire(as("pool-b"), "src/b.go", "inst-a"), "pool-b locking as pool-a's instance (%d)", i)
			require.NoError(t, acquire(as("pool-a"), "src/a.go", "inst-a"), "pool-a locking as its instance (%d)", i)
		}

		// Registered by nobody: nobody but an operator holds locks with it, until a principal
		// registers it (the store binds it then) — and from then on that principal may.
		_, err = srv.RegisterAgent(t.Context(), &registryv1.RegisterAgentRequest{InstanceId: "open", SessionId: "s1"})
		require.NoError(t, err)
		require.Error(t, acquire(as("pool-b"), "src/c.go", "open"))
		_, err = srv.RegisterAgent(as("pool-b"), &registryv1.RegisterAgentRequest{InstanceId: "open", SessionId: "s2"})
		require.NoError(t, err)
		require.NoError(t, acquire(as("pool-b"), "src/c.go", "open"))
		require.Error(t, acquire(as("pool-a"), "src/d.go", "open"))
	})
}
