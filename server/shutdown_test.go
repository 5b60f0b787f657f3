package server_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// TestShutdown: every session (holder, waiters, a connection that sent
// nothing) gets ERROR SHUTDOWN and is closed; no waiter is pushed ACQUIRED
// on the way; Ready turns false; Serve returns ErrServerClosed; new
// connections are refused.
func TestShutdown(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	srv, addr := ts.Srv, ts.Addr
	h, _ := hold(t, ts, "s", longLease)
	w1 := queue(t, ts, "s", longLease, 1)
	w2 := queue(t, ts, "s", longLease, 2)
	silent := batontest.Dial(t, ts.Addr)
	eventuallyMetric(t, srv.Registry(), "baton_connections", "", 4) // silent is accepted
	if !srv.Ready() {
		t.Fatal("Ready() false before Shutdown")
	}

	// w1 keeps heartbeating through the shutdown: every reply it gets must
	// be WAITING, up to the ERROR.
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		for {
			if _, err := w1.Conn.Write(wire.AppendHeartbeat(nil)); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for range 3 { // the heartbeats flow
		expectWaiting(t, w1, 1)
	}

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ts.Stop(t) // Srv.Shutdown; checks that Serve returned ErrServerClosed
	}()
	t.Cleanup(func() { <-stopped }) // before the server's own cleanup, even on failure

	f := h.ReadFrame(frameWait)
	if f.Type != wire.TypeError || f.Err.Code != wire.CodeShutdown {
		t.Fatalf("holder got %v, want ERROR SHUTDOWN", f)
	}
	if srv.Ready() {
		t.Error("Ready() true after sessions were told SHUTDOWN")
	}
	raw := rawFrame(f)
	if raw[0] != 0x80 || int(raw[1])<<8|int(raw[2]) != len(raw)-3 || raw[3] != 0x01 {
		t.Errorf("ERROR SHUTDOWN is % x, want 80, its length, 01, message", raw)
	}
	seenCodes.Store(wire.CodeShutdown, struct{}{})
	h.ExpectClosed(frameWait)
	for {
		f := w1.ReadFrame(frameWait)
		if f.Type == wire.TypeWaiting {
			continue
		}
		if f.Type != wire.TypeError || f.Err.Code != wire.CodeShutdown {
			t.Fatalf("heartbeating waiter got %v during shutdown, want WAITING or ERROR SHUTDOWN", f)
		}
		break
	}
	w1.ExpectClosed(frameWait)
	expectError(t, w2, wire.CodeShutdown)
	expectError(t, silent, wire.CodeShutdown)
	for _, c := range []*batontest.Conn{h, w1, w2, silent} {
		c.Conn.Close()
	}
	<-hbDone
	waitChan(t, stopped, 10*time.Second, "Shutdown did not return")

	if srv.Ready() {
		t.Error("Ready() true after Shutdown")
	}
	if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		nc.Close()
		t.Error("a new connection was accepted after Shutdown")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("Serve after Shutdown returned %v, want ErrServerClosed", err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Error("Serve after Shutdown left its listener open")
	}
	if got := srv.Locks(); len(got) != 0 {
		t.Errorf("Locks() after Shutdown = %+v, want none", got)
	}
}

// TestShutdownContext: when ctx ends before the clients have gone (they
// neither read nor close), Shutdown closes the connections, waits for its
// goroutines, and returns ctx's error. A second Shutdown returns at once.
func TestShutdownContext(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	hold(t, ts, "ctx", longLease)
	queue(t, ts, "ctx", longLease, 1)
	batontest.Dial(t, ts.Addr)
	eventuallyMetric(t, ts.Srv.Registry(), "baton_connections", "", 3)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := ts.Srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown returned %v, want context.DeadlineExceeded (the clients linger)", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Shutdown took %v after its ctx ended", d)
	}
	if got := metric(t, ts.Srv.Registry(), "baton_connections", ""); got != 0 {
		t.Fatalf("%v connections open after Shutdown returned", got)
	}
	// The cleanup's Stop shuts down again: it must not panic or hang.
}

// TestTokensAcrossRestart: after a controlled restart on the same data
// directory, the first token of each name is greater than every token
// granted before.
func TestTokensAcrossRestart(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	var highest uint64
	var conns []*batontest.Conn
	for _, name := range []string{"r1", "r2"} {
		h, tok := hold(t, ts, name, longLease)
		w := queue(t, ts, name, longLease, 1)
		h.Conn.Close()
		tok2 := expectPush(t, w, frameWait)
		highest = max(highest, tok, tok2)
		conns = append(conns, w)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ts.Restart(t)
	}()
	t.Cleanup(func() { <-stopped })
	for _, c := range conns {
		expectError(t, c, wire.CodeShutdown)
		c.Conn.Close()
	}
	waitChan(t, stopped, 15*time.Second, "Restart did not return")

	for _, name := range []string{"r2", "r1", "new"} {
		_, tok := hold(t, ts, name, longLease)
		if tok <= highest {
			t.Fatalf("%s: token %d after restart, want > %d (the highest before)", name, tok, highest)
		}
	}
}
