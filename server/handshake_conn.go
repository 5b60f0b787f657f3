package server

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// gateConn is a connection in its TLS handshake under a HandshakeGate.
type gateConn struct {
	net.Conn
	g     *HandshakeGate
	addr  netip.Addr
	key   netip.Prefix
	began time.Time
	known bool // not a stranger's: no turn to wait for
	// helloDue is when the ClientHello must be whole (zero: no limit).
	helloDue time.Time
	hello    atomic.Bool // the ClientHello is whole
	closed   chan struct{}
	once     sync.Once
	elem     *list.Element // in g.bySource[key]; guarded by g.mu
	cut      bool          // by CutOldest; guarded by g.mu

	mu       sync.Mutex
	wantRead time.Time // the read deadline the connection's user set
	phase    gatePhase
	slot     bool // holds a CPU slot
}

type gatePhase int8

const (
	phaseHello     gatePhase = iota // reading the ClientHello: costs nothing
	phaseComputing                  // between its ClientHello and VerifyConnection: a stranger's computes in a slot
	phaseComputed                   // VerifyConnection passed, or the handshake ended
)

// gateConnOf finds the gateConn under c (a tls.Conn, or any connection
// that gives the one it wraps with NetConn).
func gateConnOf(c net.Conn) *gateConn {
	for c != nil {
		if gc, ok := c.(*gateConn); ok {
			return gc
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = w.NetConn()
	}
	return nil
}

// NetConn is the connection c wraps.
func (c *gateConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes when the connection can (a plain client's ERROR,
// see refusePlain).
func (c *gateConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Read gives back the CPU slot while it waits for the peer, and takes one
// again before the handshake computes with what came.
func (c *gateConn) Read(p []byte) (int, error) {
	c.releaseSlot()
	n, err := c.Conn.Read(p)
	if err != nil && !c.hello.Load() && !c.helloDue.IsZero() && !time.Now().Before(c.helloDue) {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			c.g.cuts[CutHello].Add(1)
		}
	}
	if n > 0 && err == nil && c.needsSlot() {
		if werr := c.takeSlot(); werr != nil {
			return 0, werr
		}
	}
	return n, err
}

// Write gives back the CPU slot: the server's flight is computed.
func (c *gateConn) Write(p []byte) (int, error) {
	c.releaseSlot()
	return c.Conn.Write(p)
}

func (c *gateConn) Close() error {
	err := c.Conn.Close()
	c.finish()
	return err
}

// finish ends c's handshake for the gate, once.
func (c *gateConn) finish() {
	c.once.Do(func() {
		close(c.closed)
		c.mu.Lock()
		c.phase = phaseComputed
		c.mu.Unlock()
		c.releaseSlot()
		c.g.mu.Lock()
		c.g.leaveLocked(c)
		if c.cut {
			c.g.cutLive.Add(-1)
		}
		c.g.mu.Unlock()
	})
}

// SetReadDeadline applies t, but no later than the ClientHello's due time
// while it is not whole.
func (c *gateConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.wantRead = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(c.readDeadline(t))
}

func (c *gateConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.wantRead = t
	c.mu.Unlock()
	c.Conn.SetWriteDeadline(t)
	return c.Conn.SetReadDeadline(c.readDeadline(t))
}

func (c *gateConn) readDeadline(t time.Time) time.Time {
	if c.hello.Load() || c.helloDue.IsZero() {
		return t
	}
	if t.IsZero() || c.helloDue.Before(t) {
		return c.helloDue
	}
	return t
}

// deadline is the latest a turn may come: the read deadline set, else the
// gate's Timeout from the accept.
func (c *gateConn) deadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.wantRead.IsZero() {
		return c.wantRead
	}
	if c.g.lim.Timeout > 0 {
		return c.began.Add(c.g.lim.Timeout)
	}
	return time.Time{}
}

// helloDone is called once the ClientHello is whole: the deadline the
// connection's user set applies again, and a stranger's handshake waits
// for its turn (its rates, then a CPU slot), or fails if the turn would
// come after its deadline.
func (c *gateConn) helloDone() error {
	c.hello.Store(true)
	c.mu.Lock()
	want := c.wantRead
	c.phase = phaseComputing
	c.mu.Unlock()
	if !c.helloDue.IsZero() {
		c.Conn.SetReadDeadline(want)
	}
	if c.known {
		return nil
	}
	now := time.Now()
	deadline := c.deadline()
	wait, rs := c.g.reserve(c.key, now)
	if wait > 0 {
		if !deadline.IsZero() && now.Add(wait).After(deadline) {
			for _, r := range rs {
				r.CancelAt(now)
			}
			return c.noTurn()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
			return net.ErrClosed
		}
	}
	return c.takeSlot()
}

// noTurn fails the handshake without an alert (see errNoTurn).
func (c *gateConn) noTurn() error {
	c.g.cuts[CutNoTurn].Add(1)
	c.Conn.Close()
	return errNoTurn
}

// needsSlot reports whether what was just read is computed on: a
// stranger's handshake between its ClientHello and VerifyConnection.
func (c *gateConn) needsSlot() bool {
	if c.known {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.phase == phaseComputing && !c.slot
}

// takeSlot waits for a CPU slot, until the deadline.
func (c *gateConn) takeSlot() error {
	slots := c.g.cpu.slots
	select {
	case slots <- struct{}{}:
	default:
		var expired <-chan time.Time
		if d := c.deadline(); !d.IsZero() {
			t := time.NewTimer(time.Until(d))
			defer t.Stop()
			expired = t.C
		}
		select {
		case slots <- struct{}{}:
		case <-c.closed:
			return net.ErrClosed
		case <-expired:
			return c.noTurn()
		}
	}
	c.mu.Lock()
	if c.phase != phaseComputing || c.slot { // finished meanwhile
		c.mu.Unlock()
		<-slots
		return nil
	}
	c.slot = true
	c.mu.Unlock()
	return nil
}

func (c *gateConn) releaseSlot() {
	c.mu.Lock()
	had := c.slot
	c.slot = false
	c.mu.Unlock()
	if had {
		<-c.g.cpu.slots
	}
}

// computed is VerifyConnection's pass: what is left of the handshake (the
// client's signature, its Finished) takes no slot.
func (c *gateConn) computed() {
	c.mu.Lock()
	c.phase = phaseComputed
	c.mu.Unlock()
	c.releaseSlot()
}

// Listener returns ln with each accepted connection wrapped in the gate
// and in TLS with Config(cfg), as tls.NewListener does without the gate.
func (g *HandshakeGate) Listener(ln net.Listener, cfg *tls.Config) net.Listener {
	return &gatedListener{Listener: ln, g: g, cfg: g.Config(cfg)}
}

type gatedListener struct {
	net.Listener
	g   *HandshakeGate
	cfg *tls.Config
}

func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(l.g.Wrap(c, false), l.cfg), nil
}

// HandshakeKnown tells the gate under conn, a TLS connection whose
// handshake is complete, that its client is known, if it proved a
// verified certificate (see HandshakeGate.Known).
func HandshakeKnown(conn net.Conn) {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return
	}
	gc := gateConnOf(tc)
	if gc == nil {
		return
	}
	if cs := tc.ConnectionState(); cs.HandshakeComplete && len(cs.VerifiedChains) > 0 {
		gc.g.Known(tc)
	}
}
