package ops_test

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/batonlock/baton/ops"
)

// TestConnSendBufferBounded: every ops connection's kernel send buffer is
// bounded (ConnContext): left to the system it grows to 4 MiB for a peer
// that pipelines requests and never reads.
func TestConnSendBufferBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	ops.ConnContext(context.Background(), server)
	raw, _ := server.(*net.TCPConn).SyscallConn()
	var got int
	raw.Control(func(fd uintptr) { got, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) })
	// Linux reports twice what was set (its bookkeeping), and locks it:
	// no autotuning beyond it.
	if want := 2 * ops.ConnSendBuffer; got != want {
		t.Errorf("SO_SNDBUF of an ops connection: %d, want %d (ConnSendBuffer, doubled by the kernel)", got, want)
	}
}
