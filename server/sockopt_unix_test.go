//go:build unix

package server_test

import "syscall"

// setRcvbuf sets SO_RCVBUF on a socket before it connects, so the window
// the client advertises is small from the start.
func setRcvbuf(fd uintptr, n int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}
