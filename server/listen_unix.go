//go:build unix

package server

import (
	"net"
	"syscall"
)

// listenerOptions sets, on a listening socket before it binds, the options
// its accepted connections inherit: SO_SNDBUF (Config.SendBuffer), and
// TCP_NODELAY, which net's accept sets on each connection and the raw
// accept (accept_raw_linux.go) does not. Every option of the listener belongs
// here, in one place.
func listenerOptions(fd uintptr, cfg Config) error {
	// Best effort: a system that refuses it on a listener has no raw
	// accept, and net's accept sets it on each connection (the raw accept
	// reads it back from the listener).
	syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	if cfg.SendBuffer > 0 {
		return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, cfg.SendBuffer)
	}
	return nil
}

// presetListener sets the inherited options on ln, for listeners not made
// with ListenConfig, and reports whether its connections then need no
// option of their own. Connections already waiting in its backlog keep the
// system's defaults (only SO_SNDBUF: a bound on what a non-reading client
// can make the kernel hold, not on correctness).
func presetListener(ln net.Listener, cfg Config) bool {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return false
	}
	raw, err := tl.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = listenerOptions(fd, cfg) }); err != nil || serr != nil {
		return false
	}
	return true
}
