package server

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// acceptedOptions accepts one connection on ln and returns its SO_KEEPALIVE
// and SO_SNDBUF.
func acceptedOptions(t *testing.T, ln net.Listener) (keepalive, sndbuf int) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	raw, err := sc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var kerr, serr error
	raw.Control(func(fd uintptr) {
		keepalive, kerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		sndbuf, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	if kerr != nil || serr != nil {
		t.Fatal(kerr, serr)
	}
	return keepalive, sndbuf
}

// TestListenConfigAcceptedOptions: a connection accepted by a listener of
// ListenConfig has no keepalive and the send buffer of Config.SendBuffer
// (doubled by Linux), inherited from the listener: nothing is set per
// connection.
func TestListenConfigAcceptedOptions(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SendBuffer = 24 << 10
	ln, err := Listen(context.Background(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ka, sb := acceptedOptions(t, ln)
	if ka != 0 {
		t.Errorf("SO_KEEPALIVE = %d, want 0", ka)
	}
	if sb != 2*cfg.SendBuffer {
		t.Errorf("SO_SNDBUF = %d, want %d", sb, 2*cfg.SendBuffer)
	}
}

// TestPresetListener: a listener made elsewhere gets the send buffer set
// once, and its later connections inherit it.
func TestPresetListener(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SendBuffer = 24 << 10
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !presetListener(ln, cfg) {
		t.Fatal("presetListener: false for a TCP listener")
	}
	if _, sb := acceptedOptions(t, ln); sb != 2*cfg.SendBuffer {
		t.Errorf("SO_SNDBUF = %d, want %d", sb, 2*cfg.SendBuffer)
	}
}
