package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// A binary started without --migrate on a database whose schema is behind it stays NOT_SERVING,
// says in its log how to migrate, and answers calls Unavailable with that reason — never raw SQL
// about missing relations. Started with --migrate, nothing (no background loop) touches the
// schema before it is there.
func TestUnmigratedDatabaseIsNotServing(t *testing.T) {
	t.Parallel()
	calls := map[string]func(*grpc.ClientConn) error{
		"scheduler": func(c *grpc.ClientConn) error {
			_, err := schedulerv1.NewSchedulerServiceClient(c).ListTaskLists(context.Background(), &schedulerv1.ListTaskListsRequest{})
			return err
		},
		"registry": func(c *grpc.ClientConn) error {
			_, err := registryv1.NewRegistryServiceClient(c).ListAgents(context.Background(), &registryv1.ListAgentsRequest{})
			return err
		},
		"knowledge": func(c *grpc.ClientConn) error {
			_, err := knowledgev1.NewKnowledgeServiceClient(c).ListItems(context.Background(), &knowledgev1.ListItemsRequest{})
			return err
		},
		"verifier": func(c *grpc.ClientConn) error {
			_, err := verifierv1.NewVerifierServiceClient(c).ListReports(context.Background(), &verifierv1.ListReportsRequest{})
			return err
		},
	}
	for svc, call := range calls {
		t.Run(svc, func(t *testing.T) {
			t.Parallel()
			pg := dbtest.Postgres(t)
			env := []string{"CONVERGE_POSTGRES_URL=" + pg, "CONVERGE_REDIS_URL=" + clustertest.RedisURL()}

			addr := clustertest.FreeAddr(t)
			p := start(t, "converge-"+svc, env, "--listen", addr)
			waitHealth(t, p, addr, "", healthpb.HealthCheckResponse_NOT_SERVING)
			require.True(t, clustertest.Eventually(30*time.Second, func() bool {
				return strings.Contains(p.Output(), "schema is behind this binary") && strings.Contains(p.Output(), "--migrate")
			}), "no log line naming --migrate:\n%s", p.Output())

			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			err = call(conn)
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), "converge migrate")
			require.NotContains(t, status.Convert(err).Message(), "does not exist")

			// A replica started with --migrate migrates; both serve, and no loop ran early.
			addr2 := clustertest.FreeAddr(t)
			p2 := start(t, "converge-"+svc, env, "--listen", addr2, "--migrate")
			waitHealth(t, p2, addr2, "", healthpb.HealthCheckResponse_SERVING)
			waitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING)
			require.NoError(t, call(conn))
			for _, out := range []string{p.Output(), p2.Output()} {
				require.NotContains(t, out, "does not exist", "a background loop ran before the schema was there")
			}
		})
	}
}
