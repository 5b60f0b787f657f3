package floor

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonlock/baton/bench/internal/rawwire"
	"github.com/batonlock/baton/clients/go/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs serve on a loopback listener until the test ends.
func serve(t *testing.T, serve func(net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) *rawwire.Conn {
	t.Helper()
	c, err := rawwire.Dial(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func read(t *testing.T, c *rawwire.Conn, want wire.Type) rawwire.Frame {
	t.Helper()
	f, err := c.ReadFrame()
	if err != nil {
		t.Fatalf("read: %v, want %v", err, want)
	}
	if f.Type != want {
		t.Fatalf("got %+v, want %v", f, want)
	}
	return f
}

func acquire(t *testing.T, addr, name string, want wire.Type) (*rawwire.Conn, rawwire.Frame) {
	t.Helper()
	c := dial(t, addr)
	if err := c.Acquire(name, time.Minute, "test"); err != nil {
		t.Fatal(err)
	}
	return c, read(t, c, want)
}

// TestLockServerFIFO: grants in order of arrival, pushed at the holder's
// close (EOF or reset), tokens rising, heartbeats answered with the
// session's state.
func TestLockServerFIFO(t *testing.T) {
	addr := serve(t, NewLockServer().Serve)
	holder, g := acquire(t, addr, "a", wire.TypeAcquired)
	if g.Push || g.Token == 0 {
		t.Fatalf("first grant %+v, want a reply with a token", g)
	}
	w1, f1 := acquire(t, addr, "a", wire.TypeWaiting)
	w2, f2 := acquire(t, addr, "a", wire.TypeWaiting)
	if f1.Position != 1 || f2.Position != 2 {
		t.Fatalf("positions %d, %d; want 1, 2", f1.Position, f2.Position)
	}
	// Another name is independent.
	other, _ := acquire(t, addr, "b", wire.TypeAcquired)
	other.Close()

	for _, c := range []*rawwire.Conn{holder, w2} {
		if err := c.Heartbeat(); err != nil {
			t.Fatal(err)
		}
	}
	if f := read(t, holder, wire.TypeAcquired); f.Push || f.Token != g.Token {
		t.Errorf("holder's heartbeat reply %+v, want ACQUIRED token %d, no push", f, g.Token)
	}
	if f := read(t, w2, wire.TypeWaiting); f.Position != 2 {
		t.Errorf("second waiter's heartbeat reply %+v, want position 2", f)
	}

	holder.Close()
	p1 := read(t, w1, wire.TypeAcquired)
	if !p1.Push || p1.Token <= g.Token {
		t.Fatalf("first waiter got %+v, want a push with a token above %d", p1, g.Token)
	}
	// A release by reset promotes the same way.
	w1.Conn.(*net.TCPConn).SetLinger(0)
	w1.Close()
	p2 := read(t, w2, wire.TypeAcquired)
	if !p2.Push || p2.Token <= p1.Token {
		t.Fatalf("second waiter got %+v, want a push with a token above %d", p2, p1.Token)
	}
	if err := w2.Heartbeat(); err != nil {
		t.Fatal(err)
	}
	if f := read(t, w2, wire.TypeAcquired); f.Push || f.Token != p2.Token {
		t.Errorf("new holder's heartbeat reply %+v, want token %d, no push", f, p2.Token)
	}
	w2.Close()
	// The lock is free again: at once if the server has read the close,
	// else by a push once it does.
	again := dial(t, addr)
	if err := again.Acquire("a", time.Minute, "test"); err != nil {
		t.Fatal(err)
	}
	g3, err := again.ReadFrame()
	if err == nil && g3.Type == wire.TypeWaiting {
		g3, err = again.ReadFrame()
	}
	if err != nil || g3.Type != wire.TypeAcquired {
		t.Fatalf("after the last holder's close: %+v, %v; want ACQUIRED", g3, err)
	}
	if g3.Token <= p2.Token {
		t.Errorf("token %d after %d: tokens must rise", g3.Token, p2.Token)
	}
	again.Close()
}

// TestLockServerWaiterLeaves: a waiter that closes leaves the queue; the
// one behind it moves up and is the one promoted.
func TestLockServerWaiterLeaves(t *testing.T) {
	addr := serve(t, NewLockServer().Serve)
	holder, _ := acquire(t, addr, "a", wire.TypeAcquired)
	w1, _ := acquire(t, addr, "a", wire.TypeWaiting)
	w2, _ := acquire(t, addr, "a", wire.TypeWaiting)
	w1.Close()
	// The close is seen by the server at some point; a heartbeat answered
	// with position 1 says it was.
	for {
		if err := w2.Heartbeat(); err != nil {
			t.Fatal(err)
		}
		if f := read(t, w2, wire.TypeWaiting); f.Position == 1 {
			break
		}
	}
	holder.Close()
	if f := read(t, w2, wire.TypeAcquired); !f.Push {
		t.Errorf("got %+v, want the push", f)
	}
}

// TestLockServerErrors: NOWAIT on a held lock is BUSY; a first frame
// that is not ACQUIRE is a PROTOCOL error.
func TestLockServerErrors(t *testing.T) {
	addr := serve(t, NewLockServer().Serve)
	acquire(t, addr, "a", wire.TypeAcquired)

	c := dial(t, addr)
	b, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, Flags: wire.FlagNoWait, LeaseMs: 1000, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c.Write(b)
	if f := read(t, c, wire.TypeError); f.Err.Code != wire.CodeBusy {
		t.Errorf("NOWAIT on a held lock: %v, want BUSY", f.Err)
	}

	c = dial(t, addr)
	c.Heartbeat()
	if f := read(t, c, wire.TypeError); f.Err.Code != wire.CodeProtocol {
		t.Errorf("HEARTBEAT first: %v, want PROTOCOL", f.Err)
	}
}

// TestBareServer: one ACQUIRED reply per connection, tokens rising, and
// the server closes after the client does.
func TestBareServer(t *testing.T) {
	addr := serve(t, (&BareServer{}).Serve)
	var last uint64
	for range 3 {
		c, f := acquire(t, addr, "x", wire.TypeAcquired)
		if f.Token <= last {
			t.Errorf("token %d after %d", f.Token, last)
		}
		last = f.Token
		c.Close()
	}
	c, _ := acquire(t, addr, "x", wire.TypeAcquired)
	c.Conn.(*net.TCPConn).CloseWrite()
	if _, err := c.ReadFrame(); !errors.Is(err, io.EOF) {
		t.Errorf("after the client's close: %v, want EOF from the server's", err)
	}
}
