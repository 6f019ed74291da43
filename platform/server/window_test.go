package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/server"
)

// recordingListener keeps every byte its connections read and write.
type recordingListener struct {
	net.Listener
	mu       sync.Mutex
	in, out  bytes.Buffer // from the client, to the client
	accepted int
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.accepted++
	l.mu.Unlock()
	return &recordingConn{Conn: c, l: l}, nil
}

func (l *recordingListener) bytes() (in, out []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.in.Bytes()), bytes.Clone(l.out.Bytes())
}

type recordingConn struct {
	net.Conn
	l *recordingListener
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.l.in.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.mu.Lock()
	c.l.out.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

// frames are what one side of an HTTP/2 connection sent: its SETTINGS' initial window size
// (0 if it sent none) and its PING frames (acknowledgements included).
type frames struct {
	initialWindow uint32
	pings         int
}

func readFrames(t *testing.T, b []byte) frames {
	t.Helper()
	b = bytes.TrimPrefix(b, []byte(http2.ClientPreface))
	fr := http2.NewFramer(io.Discard, bytes.NewReader(b))
	var f frames
	for {
		frame, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return f
		}
		require.NoError(t, err)
		switch frame := frame.(type) {
		case *http2.SettingsFrame:
			if v, ok := frame.Value(http2.SettingInitialWindowSize); ok {
				f.initialWindow = v
			}
		case *http2.PingFrame:
			f.pings++
		}
	}
}

// Unary calls between client.Dial and a server exchange no PING frame: both sides use static
// flow-control windows, so neither runs grpc-go's BDP estimation, which would send a ping (and
// answer the peer's) after each call's data. Both announce the stream window in their SETTINGS.
func TestClientAndServerUseStaticWindowsSoCallsSendNoPings(t *testing.T) {
	t.Parallel()
	srv, err := server.Config{
		Name:       "windows",
		Logger:     slog.New(slog.DiscardHandler),
		DrainDelay: -1,
	}.Complete()
	require.NoError(t, err)
	var lc net.ListenConfig
	tcp, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lis := &recordingListener{Listener: tcp}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()

	conn, err := client.Dial(tcp.Addr().String(), client.Options{})
	require.NoError(t, err)
	health := healthgrpc.NewHealthClient(conn)
	for range 20 {
		_, err := health.Check(t.Context(), &healthgrpc.HealthCheckRequest{})
		require.NoError(t, err)
	}
	// What was exchanged before the shutdown's own frames (GracefulStop pings with its GOAWAY).
	in, out := lis.bytes()
	require.NoError(t, conn.Close())
	cancel()
	require.NoError(t, <-served)

	require.Equal(t, 1, lis.accepted)
	fromClient, fromServer := readFrames(t, in), readFrames(t, out)
	require.Zero(t, fromClient.pings, "PING frames from the client (BDP pings or their acks)")
	require.Zero(t, fromServer.pings, "PING frames from the server (BDP pings or their acks)")
	require.EqualValues(t, client.StreamWindowBytes, fromClient.initialWindow, "the client's SETTINGS")
	require.EqualValues(t, server.StreamWindowBytes, fromServer.initialWindow, "the server's SETTINGS")
}
