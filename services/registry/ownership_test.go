package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

func TestOwnership(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()

		set, err := c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: "server/**/**", Owner: "loop-server"})
		require.NoError(t, err)
		require.Equal(t, "server/**", set.GetOwnership().GetPattern(), "the pattern is canonical: repeated ** are one")
		require.Empty(t, set.GetPreviousOwner())
		for pattern, owner := range map[string]string{
			"server/routes/*.ts":      "loop-routes",
			"server/routes/habits.ts": "alice",
			"**/*.sql":                "loop-db",
		} {
			_, err := c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: pattern, Owner: owner})
			require.NoError(t, err)
		}
		set, err = c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: "server/**", Owner: "loop-api"})
		require.NoError(t, err)
		require.Equal(t, "loop-server", set.GetPreviousOwner())

		for path, want := range map[string]string{
			"server/routes/habits.ts":  "alice",
			"server/routes/users.ts":   "loop-routes",
			"server/db/schema.sql":     "loop-api", // "server/" is a longer literal prefix than "**/*.sql"'s
			"migrations/001_habit.sql": "loop-db",
		} {
			got, err := c.GetOwner(ctx, &registryv1.GetOwnerRequest{Path: path})
			require.NoError(t, err)
			require.Equal(t, want, got.GetOwnership().GetOwner(), path)
		}
		none, err := c.GetOwner(ctx, &registryv1.GetOwnerRequest{Path: "README.md"})
		require.NoError(t, err)
		require.Nil(t, none.GetOwnership(), "no pattern matches: ownership unset, not an error")

		_, err = c.ReleaseOwner(ctx, &registryv1.ReleaseOwnerRequest{Pattern: "server/**", Owner: "loop-server"})
		requireCode(t, codes.FailedPrecondition, err)
		require.ErrorContains(t, err, `owned by "loop-api"`)
		_, err = c.ReleaseOwner(ctx, &registryv1.ReleaseOwnerRequest{Pattern: "docs/**", Owner: "loop-api"})
		requireCode(t, codes.NotFound, err)
		_, err = c.ReleaseOwner(ctx, &registryv1.ReleaseOwnerRequest{Pattern: "**/**/../**", Owner: "loop-api"})
		requireCode(t, codes.InvalidArgument, err)
		_, err = c.ReleaseOwner(ctx, &registryv1.ReleaseOwnerRequest{Pattern: "server/**/**/**", Owner: "loop-api"})
		require.NoError(t, err, "released by its pattern, in canonical form")

		var got []string
		req := &registryv1.ListOwnersRequest{PageSize: 2}
		for {
			res, err := c.ListOwners(ctx, req)
			require.NoError(t, err)
			for _, o := range res.GetOwnerships() {
				got = append(got, o.GetPattern())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			req.PageToken = res.GetNextPageToken()
		}
		require.Equal(t, []string{"**/*.sql", "server/routes/*.ts", "server/routes/habits.ts"}, got)
		mine, err := c.ListOwners(ctx, &registryv1.ListOwnersRequest{Owner: "alice"})
		require.NoError(t, err)
		require.Len(t, mine.GetOwnerships(), 1)
	})
}
