//go:build !linux

package clustertest

import (
	"errors"
	"net"
)

// reserveLoopback, off Linux, picks a free loopback port and lets it go (another process may take
// it before Up): there is no reserved socket (fd -1).
func reserveLoopback() (fd int, addr string, err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return -1, "", err
	}
	addr = lis.Addr().String()
	_ = lis.Close()
	return -1, addr, nil
}

func listenReserved(int) (net.Listener, error) {
	return nil, errors.New("clustertest: no reserved socket")
}

func releaseReserved(int) {}
