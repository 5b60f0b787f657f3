//go:build !unix

package server

import "net"

// refuseNow sends nothing here: the connection is closed unread.
func refuseNow(net.Conn, []byte) {}
