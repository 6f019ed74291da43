//go:build linux

package clustertest

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

// reserveLoopback binds a TCP socket to a free loopback port without listening on it: connecting
// to the port is refused (what a server that is down looks like), and no other socket — another
// test's listener or an outgoing connection's ephemeral port — can take the port until the socket
// is closed or listens (listenReserved). Closing the port and binding it again later, as NewProxyDown
// did, let any process on the machine take it in between ("address already in use" at Up).
func reserveLoopback() (fd int, addr string, err error) {
	fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("clustertest: socket: %w", err)
	}
	// No SO_REUSEADDR: with it on both sides Linux lets two sockets that do not listen share a port.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return -1, "", fmt.Errorf("clustertest: bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return -1, "", fmt.Errorf("clustertest: getsockname: %w", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		_ = syscall.Close(fd)
		return -1, "", fmt.Errorf("clustertest: unexpected socket address %T", sa)
	}
	return fd, net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port)), nil
}

// listenReserved starts listening on a socket of reserveLoopback, which it takes over.
func listenReserved(fd int) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), "clustertest-proxy")
	defer f.Close() // net.FileListener holds its own copy of the descriptor
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("clustertest: listen: %w", err)
	}
	return net.FileListener(f)
}

// releaseReserved closes a socket of reserveLoopback that never listened.
func releaseReserved(fd int) { _ = syscall.Close(fd) }
