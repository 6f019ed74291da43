package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// converge-scheduler --git-listen serves local repositories to the Verifier over git's smart
// HTTP: the port answers, and nothing is exported outside a running Verify Done.
func TestSchedulerGitExportListens(t *testing.T) {
	t.Parallel()
	pg := dbtest.Postgres(t)
	addr, gitAddr := clustertest.FreeAddr(t), clustertest.FreeAddr(t)
	p := start(t, "converge-scheduler", []string{"CONVERGE_POSTGRES_URL=" + pg}, "--listen", addr, "--migrate", "--git-listen", gitAddr)
	waitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING)
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		return strings.Contains(p.Output(), "serving local repositories to the Verifier")
	}), p.Output())
	res, err := http.Get("http://" + gitAddr + "/no-such-export/info/refs?service=git-upload-pack")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}
