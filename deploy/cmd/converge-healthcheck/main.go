// Command converge-healthcheck asks a converge server's grpc.health.v1 service whether it is
// SERVING and exits 0 if so, 1 if not. The images carry it so that a Compose healthcheck or a
// Kubernetes exec probe can ask a FROM-scratch container, which has no shell and no other client.
//
//	converge-healthcheck [--addr host:port] [--service name] [--timeout 3s]
//
// The address defaults to the server's own CONVERGE_LISTEN with a wildcard host (0.0.0.0, ::, or
// none) replaced by 127.0.0.1, so inside a container the probe needs no arguments. When
// CONVERGE_TLS_CERT is set the server speaks TLS and the probe does too; it does not verify the
// certificate (it only ever talks to its own container over loopback). Health needs no token.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	addr := flag.String("addr", localAddr(os.Getenv("CONVERGE_LISTEN")), "server address host:port [default: CONVERGE_LISTEN on 127.0.0.1]")
	service := flag.String("service", "", "service name to ask about; empty = the server as a whole")
	useTLS := flag.Bool("tls", os.Getenv("CONVERGE_TLS_CERT") != "", "speak TLS (not verified) [default: CONVERGE_TLS_CERT is set]")
	timeout := flag.Duration("timeout", 3*time.Second, "give up after this long")
	flag.Parse()
	if err := check(*addr, *service, *useTLS, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "converge-healthcheck:", err)
		os.Exit(1)
	}
}

// check answers nil when the server at addr reports service SERVING.
func check(addr, service string, useTLS bool, timeout time.Duration) error {
	if addr == "" {
		return fmt.Errorf("no address: give --addr or set CONVERGE_LISTEN")
	}
	creds := insecure.NewCredentials()
	if useTLS {
		//nolint:gosec // loopback probe of the container's own server; the certificate names the service, not 127.0.0.1
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true})
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s: %s", addr, s)
	}
	return nil
}

// localAddr turns a listen address into the address to reach it from the same host.
func localAddr(listen string) string {
	if listen == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
