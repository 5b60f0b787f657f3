package idlepoll

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sess is a session of the tests: a TCP connection whose client writes.
type sess struct {
	conn    net.Conn
	pc      Conn[*sess]
	ending  atomic.Bool
	due     time.Time
	started bool // set by Serve on the shard, read after Stop or a release
}

// handler serves sessions as the server does, minimally: Serve reads what
// came and parks the session again, releases it at "r", reads it again at
// "m" (readAgain), and forgets it at the client's close.
type handler struct {
	p        *Poller[*sess]
	mu       sync.Mutex
	read     map[*sess]string
	released chan *sess
	overdue  chan *sess
	closed   chan *sess
	abandon  chan *sess
}

func (h *handler) PollConn(v *sess) *Conn[*sess] { return &v.pc }
func (h *handler) MayPark(v *sess) bool          { return !v.ending.Load() }
func (h *handler) Due(v *sess) time.Time         { return v.due }
func (h *handler) SetDue(v *sess, due time.Time) { v.due = due }
func (h *handler) Overdue(late []*sess) {
	for _, v := range late {
		h.overdue <- v
	}
}
func (h *handler) Abandon(v *sess) { h.p.Release(v); h.abandon <- v }

func (h *handler) Serve(v *sess, ended bool) bool {
	buf := v.pc.ShardBuf()
	n, err := v.pc.TryRead(buf)
	switch {
	case err == io.EOF:
		h.p.Forget(v)
		v.conn.Close()
		h.closed <- v
		return false
	case err == ErrWouldBlock:
	case err != nil:
		h.p.Release(v)
		h.released <- v
		return false
	}
	got := string(buf[:n])
	h.mu.Lock()
	h.read[v] += got
	h.mu.Unlock()
	v.started = v.started || n > 0
	switch got {
	case "r":
		h.p.Release(v)
		h.released <- v
		return false
	case "m":
		return true
	}
	if !h.p.Repark(v, v.started) {
		h.p.Release(v)
		h.released <- v
	}
	return false
}

type gauge struct{ n atomic.Int64 }

func (g *gauge) Inc() { g.n.Add(1) }
func (g *gauge) Dec() { g.n.Add(-1) }

func newPoller(t *testing.T) (*Poller[*sess], *handler, *gauge) {
	t.Helper()
	h := &handler{read: map[*sess]string{}, released: make(chan *sess, 8), overdue: make(chan *sess, 8),
		closed: make(chan *sess, 8), abandon: make(chan *sess, 8)}
	g := &gauge{}
	p, err := New[*sess](h, Config{Shards: 2, BufSize: 128, Parked: g, MoreTurn: 4, MorePace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	var wg sync.WaitGroup
	for _, sh := range p.Shards() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sh.Run(); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	t.Cleanup(func() { p.Stop(); wg.Wait() })
	return p, h, g
}

// pair returns a bound session (the server's end) and its client.
func pair(t *testing.T, p *Poller[*sess]) (*sess, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	v := &sess{conn: server}
	raw, _ := server.(syscall.Conn).SyscallConn()
	if !p.Bind(&v.pc, raw) || !v.pc.Bound() {
		t.Fatal("Bind failed on a TCP connection")
	}
	return v, client
}

func recv(t *testing.T, ch chan *sess, want *sess, what string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: another session", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10 s", what)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// TestParkedSessionIsServedOnItsShard: a parked session's bytes reach
// Serve on its shard, which parks it again (the gauge counts it all the
// while), releases it, or closes it; Park refuses a session whose end
// has begun, and Unpark takes a parked one back.
func TestParkedSessionIsServedOnItsShard(t *testing.T) {
	p, h, g := newPoller(t)
	v, client := pair(t, p)
	if ok, err := p.Park(v); !ok || err != nil {
		t.Fatalf("Park: %v, %v", ok, err)
	}
	if !p.IsParked(v) || g.n.Load() != 1 {
		t.Fatalf("parked %v, gauge %d; want parked, 1", p.IsParked(v), g.n.Load())
	}
	client.Write([]byte("hb"))
	eventually(t, "Serve read hb", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.read[v] == "hb" })
	eventually(t, "parked again", func() bool { return p.IsParked(v) })
	if g.n.Load() != 1 {
		t.Fatalf("gauge %d after a repark, want 1", g.n.Load())
	}

	// Pipelined: read again at the shard's pace, then parked.
	client.Write([]byte("m"))
	eventually(t, "read again", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.read[v] == "hbm" })
	eventually(t, "parked after its turns", func() bool { return p.IsParked(v) })

	client.Write([]byte("r"))
	recv(t, h.released, v, "release")
	if p.IsParked(v) || g.n.Load() != 0 {
		t.Fatalf("released: parked %v, gauge %d", p.IsParked(v), g.n.Load())
	}

	// Its reader parks it again; its end begins: no park, and Unpark takes it.
	if ok, _ := p.Park(v); !ok {
		t.Fatal("Park after a release refused")
	}
	v.ending.Store(true)
	if !p.Unpark(v) || p.IsParked(v) || g.n.Load() != 0 {
		t.Fatalf("Unpark: parked %v, gauge %d", p.IsParked(v), g.n.Load())
	}
	if ok, _ := p.Park(v); ok {
		t.Fatal("a session whose end has begun parked")
	}
	if p.Unpark(v) {
		t.Fatal("Unpark of a session not parked reported true")
	}

	// The client's close, on a parked session: Serve closes it.
	w, wc := pair(t, p)
	p.Park(w)
	wc.Close()
	recv(t, h.closed, w, "close")
	eventually(t, "gauge back to 0", func() bool { return g.n.Load() == 0 })
}

// TestAdoptedSessionOverdue: an adopted session whose first bytes do not
// come by its due time goes to Overdue, off the poller's books; one whose
// bytes come in time leaves the due list and is not swept.
func TestAdoptedSessionOverdue(t *testing.T) {
	p, h, g := newPoller(t)
	late, _ := pair(t, p)
	ontime, client := pair(t, p)
	if !p.Adopt(late, 50*time.Millisecond) || !p.Adopt(ontime, 50*time.Millisecond) {
		t.Fatal("Adopt failed")
	}
	client.Write([]byte("acq"))
	recv(t, h.overdue, late, "overdue")
	if p.IsParked(late) {
		t.Fatal("an overdue session is still parked")
	}
	eventually(t, "the one in time parked", func() bool { return p.IsParked(ontime) })
	select {
	case <-h.overdue:
		t.Fatal("a session whose first bytes came was swept")
	case <-time.After(200 * time.Millisecond):
	}
	if g.n.Load() != 1 {
		t.Fatalf("gauge %d, want 1 (the one in time)", g.n.Load())
	}
}
