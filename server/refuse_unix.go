//go:build unix

package server

import (
	"net"

	"golang.org/x/sys/unix"
)

// refuseNow writes frame to conn, a plain TCP connection just accepted,
// without waiting, and half-closes it; the caller closes it. What the
// client sent already is read first: a close with unread bytes sends a
// reset, which can destroy the frame before the client reads it. A client
// whose bytes come later may still see the reset; it then retries as
// after any dropped connection.
func refuseNow(conn net.Conn, frame []byte) {
	raw := tcpRawConn(conn)
	if raw == nil {
		return
	}
	raw.Control(func(fd uintptr) {
		var buf [512]byte
		for range 4 {
			if n, err := unix.Read(int(fd), buf[:]); n <= 0 || err != nil {
				break
			}
		}
		unix.Write(int(fd), frame) // a new socket's buffer takes a small frame whole
		unix.Shutdown(int(fd), unix.SHUT_WR)
	})
}
