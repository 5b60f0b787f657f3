//go:build !linux

package server

import (
	"net"
	"syscall"
)

// serveRaw reports false: elsewhere than Linux, Serve accepts through net
// (there is no idle poller to serve a raw connection).
func (s *Server) serveRaw(net.Listener) (bool, error) { return false, nil }

// tcpRawConn is nil: no session parks here.
func tcpRawConn(net.Conn) syscall.RawConn { return nil }

// setLingerZero is false: every connection here is a *net.TCPConn, which
// resetConn resets itself.
func setLingerZero(net.Conn) bool { return false }
