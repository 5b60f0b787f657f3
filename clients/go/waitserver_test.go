package baton_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// TestWaitForServer: without the option, Acquire fails at once when no
// server is up (a wrong address looks the same); with it, Acquire waits
// for the server that starts a moment later, within its context.
func TestWaitForServer(t *testing.T) {
	if _, err := buildServer(); err != nil {
		t.Skipf("SKIPPED: no server to run: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := baton.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "boot"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Acquire with no server up: %v, want ECONNREFUSED at once", err)
	}
	waiting, err := baton.New([]string{addr}, baton.WithWaitForServer(true))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiting.Acquire(ctx, "boot")
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("Acquire(WithWaitForServer) returned before a server was up: %v", err)
	default:
	}
	_, _, stop := exampleServerOps("-addr=" + addr)
	defer stop()
	if err := <-got; err != nil {
		t.Fatalf("Acquire(WithWaitForServer) once the server is up: %v", err)
	}
	// The wait is bounded by the context.
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	nobody, _ := baton.New([]string{closedAddr(t)}, baton.WithWaitForServer(true))
	if _, err := nobody.Acquire(short, "boot"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire(WithWaitForServer) with no server until the deadline: %v, want DeadlineExceeded", err)
	}
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
