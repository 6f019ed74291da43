package server

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/auth"
)

// Quotas are per principal: one principal at its limit does not lock another out.
func TestQuotasArePerPrincipal(t *testing.T) {
	t.Parallel()
	q := newQuotas(completeLimits(Limits{StreamsPerPrincipal: 2}))
	alice := auth.NewContext(context.Background(), auth.Principal{Name: "alice"})
	bob := auth.NewContext(context.Background(), auth.Principal{Name: "bob"})
	const watch = "/converge.scheduler.v1.SchedulerService/WatchExecution"

	var releases []func()
	for range 2 {
		r, err := q.acquire(alice, watch, true)
		require.NoError(t, err)
		releases = append(releases, r)
	}
	_, err := q.acquire(alice, watch, true)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Contains(t, err.Error(), `"alice"`)

	r, err := q.acquire(bob, watch, true)
	require.NoError(t, err, "bob has his own share")
	r()
	_, err = q.acquire(context.Background(), "/grpc.health.v1.Health/Watch", true)
	require.NoError(t, err, "health streams never count")

	releases[0]()
	r, err = q.acquire(alice, watch, true)
	require.NoError(t, err, "a released unit is free again")
	r()
}
