package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Finding 9: loopback is not a trust boundary. `converge dev` takes a generated token, written
// 0600 under the data dir; a caller without it is refused, and the CLI run from the same place
// finds it by itself.
func TestDevTokenRefusesOtherCallersAndTheCLIFindsIt(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	tok, path, err := newDevToken(data, false)
	require.NoError(t, err)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	var out strings.Builder
	announceDevToken(&out, tok, path)
	require.Contains(t, out.String(), tok)

	b := setupDev(t, func(o *devOptions) { o.DataDir = data; o.DevToken = tok })

	// Another local caller, without the token: refused.
	_, err = schedulerv1.NewSchedulerServiceClient(b.conn).ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	// The CLI with no flag: it reads the token from the data dir.
	t.Setenv("CONVERGE_DATA_DIR", data)
	t.Setenv("CONVERGE_TOKEN", "")
	f := clientFlags{Server: b.addr}
	conn, err := f.dial()
	require.NoError(t, err)
	defer conn.Close()
	_, err = schedulerv1.NewSchedulerServiceClient(conn).ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
	require.NoError(t, err)

	// It never sends the token to another host.
	require.Empty(t, discoverDevToken("192.0.2.1:7070"))
	require.Equal(t, tok, discoverDevToken("localhost:7070"))
}
