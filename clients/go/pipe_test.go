package baton

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// This file is a scripted server peer over net.Pipe, for tests inside
// synctest.Test: the test goroutine plays the server frame by frame, and the
// bubble's fake clock makes a 30s lease take no real time.

// pipeNet replaces a Client's dialer: every dial makes a net.Pipe and hands
// its server end to the test as a peer.
type pipeNet struct {
	t      *testing.T
	peers  chan *peer
	unread bool // peers do not read: the test reads p.conn itself
	// clock is the client's: the bubble's fake time plus the suspends the
	// test makes.
	clock *suspendClock

	// server, if set, serves every connection instead of handing it to
	// the test as a peer: a fakeCluster's (fakev3_test.go).
	server func(addr string, c net.Conn, reset func())

	mu    sync.Mutex
	dials []string        // addresses dialled, in order
	down  map[string]bool // addresses that refuse
	// fastOpen records, per dial, whether it was asked for TCP Fast Open
	// and with which data in the SYN.
	fastOpen []bool
	syn      [][]byte
	// hold, if not nil, makes each dial wait until it is closed or sent a
	// value: a slow handshake, during which a test can suspend the clock.
	hold chan struct{}
}

// pipeEnd is the client's end of a pipe; once reset, a read that fails
// fails as on a TCP connection that received a reset.
type pipeEnd struct {
	net.Conn
	reset atomic.Bool
}

func (c *pipeEnd) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.reset.Load() {
		return n, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	return n, err
}

func newPipeClient(t *testing.T, addrs []string, opts ...Option) (*Client, *pipeNet) {
	t.Helper()
	c, err := New(addrs, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	pn := &pipeNet{t: t, peers: make(chan *peer, 16), down: map[string]bool{}, clock: &suspendClock{}}
	c.dial = pn.dial
	c.now = pn.clock.now
	return c, pn
}

func (pn *pipeNet) dial(ctx context.Context, addr string, set *settings) (net.Conn, net.Conn, error) {
	pn.mu.Lock()
	pn.dials = append(pn.dials, addr)
	pn.fastOpen = append(pn.fastOpen, set.fastOpen)
	pn.syn = append(pn.syn, set.syn)
	down := pn.down[addr]
	hold := pn.hold
	pn.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	if down {
		return nil, nil, &net.OpError{Op: "dial", Net: "pipe", Err: errors.New("connection refused")}
	}
	p1, sc := net.Pipe()
	cc := &pipeEnd{Conn: p1}
	reset := func() { cc.reset.Store(true); sc.Close() }
	if pn.server != nil {
		pn.t.Cleanup(func() { sc.Close() })
		go pn.server(addr, sc, reset)
		return cc, cc, nil
	}
	if pn.unread {
		pn.t.Cleanup(func() { sc.Close() })
		pn.peers <- &peer{conn: sc, addr: addr, resetConn: reset}
		return cc, cc, nil
	}
	p := newPeer(pn.t, sc, addr)
	p.resetConn = reset
	pn.peers <- p
	return cc, cc, nil
}

func (pn *pipeNet) setDown(addr string, down bool) {
	pn.mu.Lock()
	pn.down[addr] = down
	pn.mu.Unlock()
}

func (pn *pipeNet) dialCount() int {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	return len(pn.dials)
}

// accept returns the next connection the client made.
func (pn *pipeNet) accept(t *testing.T) *peer {
	t.Helper()
	select {
	case p := <-pn.peers:
		return p
	case <-time.After(time.Hour):
		t.Fatalf("no connection within an hour (fake time)")
		return nil
	}
}

// noDial fails if the client dialled again.
func (pn *pipeNet) noDial(t *testing.T) {
	t.Helper()
	select {
	case p := <-pn.peers:
		t.Fatalf("unexpected connection to %s", p.addr)
	default:
	}
}

// rx is one frame from the client and when the peer read it.
type rx struct {
	typ     wire.Type
	payload []byte
	at      time.Time
}

// peer is the server end of one connection.
type peer struct {
	conn      net.Conn
	addr      string
	rx        chan rx // closed when the client's side is closed
	eof       time.Time
	resetConn func() // ends the connection as a reset: the client reads ECONNRESET
}

func newPeer(t *testing.T, conn net.Conn, addr string) *peer {
	p := &peer{conn: conn, addr: addr, rx: make(chan rx, 64)}
	go p.read()
	t.Cleanup(func() { conn.Close() })
	return p
}

func (p *peer) read() {
	defer close(p.rx)
	for {
		var h [wire.HeaderSize]byte
		if _, err := io.ReadFull(p.conn, h[:]); err != nil {
			p.eof = time.Now()
			return
		}
		hdr, err := wire.ParseHeader(h[:])
		if err != nil {
			p.eof = time.Now()
			return
		}
		b := make([]byte, hdr.Length)
		if _, err := io.ReadFull(p.conn, b); err != nil {
			p.eof = time.Now()
			return
		}
		p.rx <- rx{typ: hdr.Type, payload: b, at: time.Now()}
	}
}

// next returns the next frame from the client, which must be of type want.
func (p *peer) next(t *testing.T, want wire.Type) rx {
	t.Helper()
	select {
	case f, ok := <-p.rx:
		if !ok {
			t.Fatalf("client closed the connection at %v, want a %v frame", p.eof, want)
		}
		if f.typ != want {
			t.Fatalf("got a %v frame, want %v", f.typ, want)
		}
		return f
	case <-time.After(24 * time.Hour):
		t.Fatalf("no %v frame within a day (fake time)", want)
		return rx{}
	}
}

// closed waits for the client to close the connection and returns when the
// peer saw it; frames sent before are skipped and returned.
func (p *peer) closed(t *testing.T) (time.Time, []rx) {
	t.Helper()
	var skipped []rx
	for {
		select {
		case f, ok := <-p.rx:
			if !ok {
				return p.eof, skipped
			}
			skipped = append(skipped, f)
		case <-time.After(24 * time.Hour):
			t.Fatalf("client did not close the connection within a day (fake time)")
		}
	}
}

func (p *peer) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := p.conn.Write(b); err != nil {
		t.Fatalf("peer write: %v", err)
	}
}

func (p *peer) waiting(t *testing.T, pos uint32) { t.Helper(); p.send(t, wire.AppendWaiting(nil, pos)) }
func (p *peer) acquired(t *testing.T, token uint64) {
	t.Helper()
	p.send(t, wire.AppendAcquired(nil, false, token))
}
func (p *peer) push(t *testing.T, token uint64) {
	t.Helper()
	p.send(t, wire.AppendAcquired(nil, true, token))
}
func (p *peer) fail(t *testing.T, code wire.Code, msg string) {
	t.Helper()
	p.send(t, wire.AppendError(nil, code, msg))
	p.conn.Close()
}

// acquireResult is what an Acquire run in the background returned, and when.
type acquireResult struct {
	l   *Lock
	err error
	at  time.Time
}

func goAcquire(ctx context.Context, c *Client, name string, opts ...Option) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		l, err := c.Acquire(ctx, name, opts...)
		ch <- acquireResult{l, err, time.Now()}
	}()
	return ch
}

func result(t *testing.T, ch <-chan acquireResult) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(24 * time.Hour):
		t.Fatalf("Acquire did not return within a day (fake time)")
		return acquireResult{}
	}
}

// holdLock runs the start of a session: ACQUIRE answered ACQUIRED at once.
func holdLock(t *testing.T, c *Client, pn *pipeNet, token uint64, opts ...Option) (*Lock, *peer) {
	t.Helper()
	ch := goAcquire(context.Background(), c, "jobs", opts...)
	p := pn.accept(t)
	p.next(t, wire.TypeAcquire)
	p.acquired(t, token)
	r := result(t, ch)
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	t.Cleanup(func() { r.l.Release() })
	return r.l, p
}
