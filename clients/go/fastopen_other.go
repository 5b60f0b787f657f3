//go:build !linux

package baton

import (
	"errors"
	"net"
)

func setFastOpenConnect(fd uintptr) error {
	return errors.New("TCP Fast Open is supported on Linux only")
}

const fastOpenSupported = false

func awaitConnected(tc *net.TCPConn) error { return nil }
