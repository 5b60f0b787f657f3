package baton

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTLSErrorIsItsOwn: a certificate the client does not trust is an
// error matching ErrTLS, not retryable; a refused connection is not ErrTLS.
func TestTLSErrorIsItsOwn(t *testing.T) {
	cert, _ := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	c := newTestClient(t, []string{ln.Addr().String()}, WithTLSConfig(&tls.Config{}), WithWaitForServer(true))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Acquire(ctx, "secure")
	if !errors.Is(err, ErrTLS) || IsRetryable(err) || time.Since(start) > 2*time.Second {
		t.Errorf("Acquire with an untrusted certificate (WithWaitForServer): %v after %v; want ErrTLS at once, not retryable", err, time.Since(start))
	}
	refused := closedPort(t)
	_, err = newTestClient(t, []string{refused}).Acquire(ctx, "x")
	if errors.Is(err, ErrTLS) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Acquire of a refused connection: %v, want ECONNREFUSED and not ErrTLS", err)
	}
}

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRetriesAndBackoffOptions: WithBackoff sets the waits between
// attempts, WithRetries bounds how many there are.
func TestRetriesAndBackoffOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a server that breaks every connection at once
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	var waits []time.Duration
	c := newTestClient(t, []string{ln.Addr().String()}, WithBackoff(10*time.Millisecond, 40*time.Millisecond), WithRetries(5),
		WithRetryFunc(func(err error, wait time.Duration) { waits = append(waits, wait) }))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Acquire(ctx, "jobs")
	if err == nil || !strings.Contains(err.Error(), "gave up after 5 retries") || !IsRetryable(err) {
		t.Fatalf("Acquire against a server that breaks every connection, WithRetries(5): %v, want the last error after 5 retries", err)
	}
	if len(waits) != 5 {
		t.Errorf("%d retries reported, want 5: %v", len(waits), waits)
	}
	for i, w := range waits {
		if w > 40*time.Millisecond {
			t.Errorf("retry %d waited %v, above WithBackoff's 40ms", i, w)
		}
	}
	if _, err := New([]string{"x:1"}, WithBackoff(0, time.Second)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("WithBackoff(0, 1s): %v, want ErrBadRequest", err)
	}
}
