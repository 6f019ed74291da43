package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/dashboard"
)

// TestDevServesTheDashboard: with Dashboard.Listen set, runDev serves the dashboard on its own
// listener, reading the suite through its gRPC address; it stops with the suite.
func TestDevServesTheDashboard(t *testing.T) {
	t.Parallel()
	addr := make(chan string, 1)
	setupDev(t, func(o *devOptions) {
		o.InMemory = true
		o.Dashboard.Listen = "127.0.0.1:0"
		o.Dashboard.Ready = func(a string) { addr <- a }
	})
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatal("the dashboard never listened")
	}
	res, err := http.Get(url + "/")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	require.Contains(t, string(body), "No runs yet")
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'")
}

// TestDevDashboardAddressInUse: a --dashboard address that cannot be bound stops converge dev with
// an error naming the flag.
func TestDevDashboardAddressInUse(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts := devOptions{InMemory: true}
	opts.LogFormat, opts.LogLevel = "text", "warn"
	opts.Dashboard.Listen = taken.Addr().String()
	err = runDev(t.Context(), opts, lis, io.Discard)
	require.ErrorContains(t, err, "--dashboard "+taken.Addr().String())
}

// TestDevDashboardNeverOpensTheSuite: a non-loopback dashboard needs tokens (or
// --allow-unauthenticated), and client-certificate auth cannot be passed on.
func TestDevDashboardNeverOpensTheSuite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*devOptions)
		want   string
	}{
		{"open", func(o *devOptions) { o.Dashboard.Listen = "0.0.0.0:0" }, "not a loopback address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			opts := devOptions{InMemory: true}
			opts.LogFormat, opts.LogLevel = "text", "warn"
			tc.mutate(&opts)
			err = runDev(t.Context(), opts, lis, io.Discard)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Client certificates (the server's own TLS material is checked before, so the hook alone).
	opts := devOptions{}
	opts.Listen, opts.TLSClientCA = "127.0.0.1:7070", "ca.pem"
	opts.Dashboard.Listen = "127.0.0.1:0"
	_, err := startDashboard(t.Context(), opts, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "--tls-client-ca")

	require.True(t, dashboard.Loopback("127.0.0.1:7080"))
	require.True(t, dashboard.Loopback("[::1]:7080"))
	require.True(t, dashboard.Loopback("localhost:7080"))
	require.False(t, dashboard.Loopback("0.0.0.0:7080"))
	require.False(t, dashboard.Loopback(":7080"))
}
