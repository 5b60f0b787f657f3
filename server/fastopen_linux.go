package server

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

const fastOpenSupported = true

// fastOpenQueue bounds the connections whose SYN carried data and that are
// not yet accepted; past it, new ones fall back to the ordinary handshake.
const fastOpenQueue = 1024

// tcpFastOpen is TCP_FASTOPEN, which package syscall lacks.
const tcpFastOpen = 23

// enableFastOpen sets TCP_FASTOPEN on ln's socket (the option works on a
// listening socket as well as before listen). A failure, or a kernel that
// does not allow the server side, is logged: the server then serves with
// ordinary handshakes, which is correct, only a round trip slower.
func (s *Server) enableFastOpen(ln net.Listener) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		s.log.Warn("tcp-fastopen: not a TCP listener; ordinary handshakes", "listener", ln.Addr().String())
		return
	}
	rc, err := sc.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpFastOpen, fastOpenQueue)
		})
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		s.log.Warn("tcp-fastopen: cannot enable; ordinary handshakes", "listener", ln.Addr().String(), "err", err)
		return
	}
	// The sysctl of the server's network namespace: bit 2 allows the server
	// side (bit 1 the client side).
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_fastopen")
	if v, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && v&2 == 0 {
		s.log.Warn("tcp-fastopen: the kernel does not allow it on the server side; set bit 2 of net.ipv4.tcp_fastopen (sysctl -w net.ipv4.tcp_fastopen=3)",
			"listener", ln.Addr().String(), "net.ipv4.tcp_fastopen", v)
		return
	}
	s.log.Info("tcp-fastopen on", "listener", ln.Addr().String())
}
