package baton

import (
	"net"
	"syscall"
)

// dialer is the dialer of one connection. TCP keepalive is off: heartbeats
// and the lease detect a dead peer, so the probes would only cost four
// setsockopt calls per claim.
func dialer(set *settings) *net.Dialer {
	d := &net.Dialer{KeepAlive: -1}
	if set.fastOpen {
		d.Control = fastOpenControl
	}
	return d
}

// resetOnClose makes the close of c a reset (SO_LINGER 0): the release
// reaches the server as a RST, and the client keeps no TIME_WAIT socket,
// whose ports a claim storm would otherwise exhaust (the kernel's search
// for a free port among thousands of them was a third of the machine's
// CPU). Best effort: where the platform refuses, the close is a FIN.
func resetOnClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}

// closeNormally undoes resetOnClose: the close of c sends a FIN after what
// is still unsent.
func closeNormally(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(-1)
	}
}

// fastOpenControl asks for TCP Fast Open on the socket before it connects
// (fastopen_linux.go; settings.check refuses it elsewhere).
func fastOpenControl(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = setFastOpenConnect(fd) }); err != nil {
		return err
	}
	return serr
}
