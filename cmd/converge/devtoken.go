package main

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/converge-dev/converge/platform/auth"
)

// The dev token (docs/security.md, "converge dev on one machine"): loopback is not a trust
// boundary (any local user can connect to 127.0.0.1), so `converge dev` makes a random token at
// every start, prints it once, and writes it 0600 to <data-dir>/dev-token, where the converge
// CLI on the same machine (same data dir) finds it. --insecure-no-auth turns it off.

// devTokenFile is the dev token's file name under the data dir.
const devTokenFile = "dev-token"

// newDevToken makes the token of a `converge dev` start and writes it under dataDir (unless
// inMemory: nothing is kept), answering the token and where it was written ("" for nowhere).
func newDevToken(dataDir string, inMemory bool) (token, path string, err error) {
	token = auth.NewToken()
	if inMemory {
		return token, "", nil
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", "", fmt.Errorf("--data-dir: %w", err)
	}
	path = filepath.Join(dataDir, devTokenFile)
	// A fresh file each time, never one another user planted with looser permissions.
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("dev token: %w", err)
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		_ = f.Close()
		return "", "", fmt.Errorf("dev token: %w", err)
	}
	return token, path, f.Close()
}

// announceDevToken prints the dev token once, with where the CLI finds it.
func announceDevToken(w io.Writer, token, path string) {
	if path == "" {
		fmt.Fprintf(w, "converge dev: callers must send this token (CONVERGE_TOKEN or --token): %s\n", token)
		return
	}
	fmt.Fprintf(w, "converge dev: callers must send this token (CONVERGE_TOKEN or --token): %s\n"+
		"  written to %s (mode 0600): the converge CLI run from here reads it by itself\n", token, path)
}

// discoverDevToken answers the token of the `converge dev` whose data dir is CONVERGE_DATA_DIR
// (default .converge), for a client with no token of its own talking to a loopback server;
// "" when there is none. A token is never sent to another host.
func discoverDevToken(server string) string {
	host, _, err := net.SplitHostPort(server)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ""
	}
	data, err := os.ReadFile(filepath.Join(cmp.Or(os.Getenv("CONVERGE_DATA_DIR"), ".converge"), devTokenFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
