package ops

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/batonlock/baton/server"
)

// ListenerLimits are the bounds of the ops listener's connections (see
// LimitListener).
type ListenerLimits struct {
	// Conns is the most open connections. Past it, the longest idle
	// keep-alive connection is closed to make room for a new one (one
	// that has made no authenticated request first); when none is idle,
	// the new connection waits until one closes, and the ones after it
	// wait in the kernel's backlog, holding no descriptor of the process.
	// Must be positive.
	Conns int
	// ConnsPerIP is the most connections from one IP address that have
	// made no authenticated request (see Trust); past it, the address's
	// longest idle one is closed for a new one. When none is idle, the new
	// one waits, before its first byte is read, up to RoomWait for one to
	// go idle or close (at most WaitingPerIP of an address wait at once;
	// past them, or past the wait, it is closed). Zero means no cap.
	ConnsPerIP int
	// Registerer receives the refusals (baton_ops_refusals_total, reason
	// connections_per_ip); nil keeps them unpublished.
	Registerer prometheus.Registerer
	// Logger receives a warn line for refused connections, rate-limited;
	// nil means slog.Default().
	Logger *slog.Logger
	// Prefixes say which addresses are one for ConnsPerIP and RequestRate
	// (an IPv6 host has a /64); the zero value counts each address apart.
	Prefixes server.SourcePrefixes
	// RequestRate is how many requests a second the connections of one
	// source that have made no authenticated request begin together
	// (twice as many at once); more wait for their turn (requestrate.go).
	// Zero means no limit.
	RequestRate rate.Limit
}

// SlowRequestAfter is how long a connection may take to send its first
// request's headers (its TLS handshake included) before, the listener
// being full, it gives way to a new connection: a client sends them at
// once, so the oldest that has not is a slow one, or one that holds its
// place on purpose, which would otherwise keep it for the server's whole
// header timeout, renewed as often as the peer likes.
const SlowRequestAfter = time.Second

// RoomWait is how long a new connection of an address at its ConnsPerIP,
// none of them idle, waits for one of them to go idle or close: one that
// is busy now answers within moments (a hog's connections, dialled again
// and again, are busy only that long), and an operator who shares the
// address must not be turned away for it.
const RoomWait = time.Second

// WaitingPerIP is how many new connections of one address wait for room
// at once (RoomWait); more are closed at once.
const WaitingPerIP = 8

// LimitListener bounds the connections of the ops listener by lim. A
// keep-alive connection that waits for its next request holds nothing a
// new caller needs: when the listener is full, or an address is at its
// cap, the longest idle one gives way; when the listener is full and none
// is idle, the oldest that has not sent its first request's headers
// within SlowRequestAfter does. So idle and slow connections, however
// many and from wherever, never keep a probe, a scraper or an operator out
// for much more than SlowRequestAfter, and one address's connections that
// are not idle (requests in progress, or headers still to come, within
// the server's header timeout) take at most ConnsPerIP places. Its connections give the one they wrap (NetConn), so
// that a stream can bound its socket's send buffer (ConnContext); the
// http.Server must report their states with ConnState.
func LimitListener(l net.Listener, lim ListenerLimits) net.Listener {
	log := lim.Logger
	if log == nil {
		log = slog.Default()
	}
	refused := newRefusalCounters(lim.Registerer)
	return &limitListener{Listener: l, lim: lim, sem: make(chan struct{}, lim.Conns), done: make(chan struct{}), becameIdle: make(chan struct{}, 1),
		conns: make(map[*limitConn]struct{}), untrusted: make(map[netip.Prefix]int), waiting: make(map[netip.Prefix]int), roomChanged: make(chan struct{}),
		refused: refused[refusedConnsPerIP], refusedRate: refused[refusedRequestRate], log: log, refusals: server.NewRefusalLog(),
		requests: make(map[netip.Prefix]*rate.Limiter), requestsOverflow: rate.NewLimiter(lim.RequestRate, 2*int(max(1, lim.RequestRate)))}
}

type limitListener struct {
	net.Listener
	lim       ListenerLimits
	sem       chan struct{} // a place for each connection served
	closeOnce sync.Once
	done      chan struct{} // closed by Close: a waiting Accept gives up
	// becameIdle wakes an Accept that waits for a place: a connection went
	// idle, and may give way.
	becameIdle chan struct{}
	refused    prometheus.Counter
	// refusedRate counts requests answered 429 for their source's rate.
	refusedRate prometheus.Counter
	log         *slog.Logger
	refusals    *server.RefusalLog

	mu sync.Mutex
	// conns are the open connections Accept returned or is placing.
	conns map[*limitConn]struct{}
	// untrusted counts, per source (lim.Prefixes), the open connections
	// that have made no authenticated request, and waiting those that
	// wait for room among them (RoomWait).
	untrusted map[netip.Prefix]int
	waiting   map[netip.Prefix]int
	// roomChanged is closed, and replaced, when a connection goes idle or
	// closes: a connection waiting for room looks again.
	roomChanged chan struct{}
	// requests are the budgets of untrusted requests per source
	// (requestrate.go), and requestsOverflow the one of sources past
	// maxRequestSources.
	requests         map[netip.Prefix]*rate.Limiter
	requestsOverflow *rate.Limiter
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := l.admit(c)
		if lc == nil {
			continue // refused: the address is at its cap
		}
		if !l.place(lc) {
			return nil, net.ErrClosed
		}
		l.mu.Lock()
		lc.placed = true
		l.mu.Unlock()
		return lc, nil
	}
}

// place takes a place for lc: at once if one is free, else the place of
// the longest idle connection, as soon as there is one (the others may be
// busy now and idle later), or of one that closes. False, with lc closed,
// if the listener is closed meanwhile.
func (l *limitListener) place(lc *limitConn) bool {
	select {
	case l.sem <- struct{}{}:
		return true
	default:
	}
	for {
		l.mu.Lock()
		v := l.idlestLocked(func(*limitConn) bool { return true })
		var slowIn time.Duration
		if v == nil {
			v, slowIn = l.slowestLocked(time.Now())
		}
		l.mu.Unlock()
		if v != nil {
			v.Close() // gives its place back
		}
		var slow <-chan time.Time
		var timer *time.Timer
		if slowIn > 0 {
			timer = time.NewTimer(slowIn)
			slow = timer.C
		}
		placed, closed := false, false
		select {
		case l.sem <- struct{}{}:
			placed = true
		case <-l.becameIdle:
		case <-slow: // the oldest still without its headers is slow now
		case <-l.done:
			closed = true
		}
		if timer != nil {
			timer.Stop()
		}
		if closed {
			lc.Close()
			return false
		}
		if placed {
			return true
		}
	}
}

// admit counts c against its address, making room by closing the
// address's longest idle connection if it is at its cap. When none is
// idle, c is admitted to wait for room in its own goroutine, at its first
// Read (awaitRoom), unless WaitingPerIP of its address wait already: then
// nil, with c closed.
func (l *limitListener) admit(c net.Conn) *limitConn {
	lc := &limitConn{Conn: c, l: l, accepted: time.Now(), addr: l.lim.Prefixes.KeyOf(c.RemoteAddr())}
	l.mu.Lock()
	victim, ok := l.roomLocked(lc)
	if !ok {
		if l.waiting[lc.addr] >= WaitingPerIP {
			n := l.untrusted[lc.addr]
			l.mu.Unlock()
			l.refuse(lc, n)
			c.Close() // not lc: it was never counted
			return nil
		}
		l.waiting[lc.addr]++
		lc.waits = true
	}
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return lc
}

// roomLocked counts lc against its address if there is room, or makes
// room by choosing the address's longest idle connection (victim, to be
// closed by the caller); false if the address is at its cap with none
// idle. l.mu must be held.
func (l *limitListener) roomLocked(lc *limitConn) (victim *limitConn, ok bool) {
	if max := l.lim.ConnsPerIP; max > 0 && lc.addr.IsValid() && l.untrusted[lc.addr] >= max {
		victim = l.idlestLocked(func(v *limitConn) bool { return !v.trusted && v.addr == lc.addr })
		if victim == nil {
			return nil, false
		}
	}
	if lc.addr.IsValid() {
		l.untrusted[lc.addr]++
	}
	return victim, true
}

// refuse counts and logs lc, refused for its address's cap with open
// connections; the caller closes it.
func (l *limitListener) refuse(lc *limitConn, open int) {
	l.refused.Inc()
	l.refusals.Warn(l.log, "ops: connection refused: its address has as many connections open as it may, none of them idle",
		"client", lc.RemoteAddr().String(), "open", open, "ops_max_conns_per_ip", l.lim.ConnsPerIP)
}

// awaitRoom, on lc's own goroutine before its first byte is read, waits
// up to RoomWait for room among its address's connections (admit); false,
// with lc closed, if none came.
func (l *limitListener) awaitRoom(lc *limitConn) bool {
	deadline := time.NewTimer(RoomWait)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		changed := l.roomChanged
		victim, ok := l.roomLocked(lc)
		n := l.untrusted[lc.addr]
		if ok {
			lc.waits = false
			l.waiting[lc.addr]--
			if l.waiting[lc.addr] <= 0 {
				delete(l.waiting, lc.addr)
			}
		}
		l.mu.Unlock()
		if ok {
			if victim != nil {
				victim.Close()
			}
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			l.refuse(lc, n)
			lc.Close()
			return false
		case <-l.done:
			lc.Close()
			return false
		}
	}
}

// roomMayHaveChanged wakes the connections waiting for room: one went
// idle or closed.
func (l *limitListener) roomMayHaveChanged() {
	l.mu.Lock()
	close(l.roomChanged)
	l.roomChanged = make(chan struct{})
	l.mu.Unlock()
}

// slowestLocked returns the oldest placed connection that has not sent
// its first request's headers within SlowRequestAfter of its accept, and
// else how long until the oldest that has not will be (0: none is
// waiting for them). l.mu must be held.
func (l *limitListener) slowestLocked(now time.Time) (*limitConn, time.Duration) {
	var oldest *limitConn
	for c := range l.conns {
		if !c.placed || c.started.Load() {
			continue
		}
		if oldest == nil || c.accepted.Before(oldest.accepted) {
			oldest = c
		}
	}
	if oldest == nil {
		return nil, 0
	}
	if wait := oldest.accepted.Add(SlowRequestAfter).Sub(now); wait > 0 {
		return nil, wait
	}
	oldest.started.Store(true) // given way once: not chosen again
	return oldest, 0
}

// idlestLocked returns the connection that has been idle longest among
// those that may give way (placed, waiting for their next request) and
// that which accepts, preferring one that has made no authenticated
// request; nil if none. l.mu must be held.
func (l *limitListener) idlestLocked(which func(*limitConn) bool) *limitConn {
	var best *limitConn
	var since int64
	for c := range l.conns {
		idle := c.idleSince.Load()
		if !c.placed || idle == 0 || !which(c) {
			continue
		}
		if best == nil || (best.trusted && !c.trusted) || (best.trusted == c.trusted && idle < since) {
			best, since = c, idle
		}
	}
	if best != nil && !best.idleSince.CompareAndSwap(since, 0) {
		return nil // a request began on it just now: it is no longer idle
	}
	return best
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its place back at its first Close.
type limitConn struct {
	net.Conn
	l    *limitListener
	addr netip.Prefix // its source; invalid when the peer is not an IP address
	once sync.Once
	// accepted is when it was accepted; started, that a request's headers
	// were whole on it (ConnState), or that it was ended for being slow.
	accepted time.Time
	started  atomic.Bool

	// idleSince is when it went idle between requests (unix nanoseconds),
	// 0 while it is not: from the first byte of a request (Read) until
	// the server has answered it (ConnState).
	idleSince atomic.Int64

	// Guarded by l.mu.
	placed  bool // it holds a place of l.sem
	trusted bool // it made an authenticated request (trust)
	waits   bool // it waits for room among its address's connections (awaitRoom), not yet counted
}

// Read marks the connection busy as soon as a request's first bytes come:
// the server reports it active only once the request's headers are whole.
// A connection admitted to wait for room (admit) waits first.
func (c *limitConn) Read(p []byte) (int, error) {
	c.l.mu.Lock()
	waits := c.waits
	c.l.mu.Unlock()
	if waits && !c.l.awaitRoom(c) {
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.idleSince.Load() != 0 {
		c.idleSince.Store(0)
	}
	return n, err
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		delete(l.conns, c)
		switch {
		case c.waits:
			c.waits = false
			if l.waiting[c.addr]--; l.waiting[c.addr] <= 0 {
				delete(l.waiting, c.addr)
			}
		case !c.trusted && c.addr.IsValid():
			if l.untrusted[c.addr]--; l.untrusted[c.addr] <= 0 {
				delete(l.untrusted, c.addr)
			}
		}
		placed := c.placed
		l.mu.Unlock()
		if placed {
			<-l.sem
		}
		l.roomMayHaveChanged()
	})
	return err
}

// NetConn is the connection c wraps.
func (c *limitConn) NetConn() net.Conn { return c.Conn }

// limitConnOf is the listener's connection under c (through TLS), or nil.
func limitConnOf(c net.Conn) *limitConn {
	for c != nil {
		if lc, ok := c.(*limitConn); ok {
			return lc
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = w.NetConn()
	}
	return nil
}

// ConnState is the http.Server.ConnState of the ops listener: it tells
// LimitListener which connections are idle between requests, and may
// give way to new ones.
func ConnState(c net.Conn, st http.ConnState) {
	if st == http.StateActive {
		server.HandshakeKnown(c) // a verified client certificate: not a stranger to the handshake gate
	}
	lc := limitConnOf(c)
	if lc == nil {
		return
	}
	if st == http.StateActive {
		lc.started.Store(true)
	}
	if st == http.StateIdle {
		lc.idleSince.Store(time.Now().UnixNano())
		select {
		case lc.l.becameIdle <- struct{}{}:
		default:
		}
		lc.l.roomMayHaveChanged()
	} else {
		lc.idleSince.Store(0)
	}
}

// trust takes the connection of a request that proved who sends it (the
// admin token, a dashboard login, a member's forward channel) out of its
// address's cap (ListenerLimits.ConnsPerIP).
func trust(ctx context.Context) {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	lc := limitConnOf(c)
	if lc == nil {
		return
	}
	l := lc.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.trusted {
		return
	}
	lc.trusted = true
	if lc.addr.IsValid() {
		if l.untrusted[lc.addr]--; l.untrusted[lc.addr] <= 0 {
			delete(l.untrusted, lc.addr)
		}
	}
}
