package server

import (
	"container/list"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// What a TLS handshake costs before anyone is known.
//
// A TLS listener runs a handshake for whoever connects, and sees a
// certificate only at its end. Until then a connection costs memory
// (crypto/tls reads a record whole: a 5-byte header announcing 16 KiB
// makes it hold 16 KiB, beside the connection's goroutine), a descriptor,
// and, once its ClientHello is whole, CPU: the key exchange and the
// server's signature, about 0.4 ms, which a peer that replays one captured
// ClientHello gets without doing any cryptography itself. A HandshakeGate
// bounds each, for the listeners it wraps:
//
//   - memory and descriptors: at most Pending handshakes at once; past it
//     one of the source with the most in progress is cut for the new one
//     (its oldest that has not sent its whole ClientHello, else its
//     oldest), as the Raft port ends the oldest silent one
//     (cluster/accept.go). A ClientHello must be whole within HelloTimeout
//     of the accept: clients send it at once.
//   - CPU: the handshakes of strangers compute in at most HandshakeCPU's
//     slots at once, fewer than the process's Ps, so heartbeats, Raft and
//     the handshakes of known clients always find one; and each source of
//     strangers (an address, or an IPv6 /64) begins at most SourceRate a
//     second (all strangers StrangerRate, where set). A handshake waits for
//     its turn rather than being refused, within its own deadline.
//
// A stranger is a source that has not finished a handshake with a verified
// client certificate in the last KnownFor (or, for the Raft port, any IP
// that is not a member's). Without client certificates every source is a
// stranger: completing a handshake proves nothing there, and a known
// source's handshakes are not rate-limited.

// DefaultPendingHandshakes is Pending's default for the protocol listener:
// at about 32 KiB each (a 16 KiB record buffer, a goroutine, the TLS
// state) 1024 take about 32 MiB.
const DefaultPendingHandshakes = 1024

// DefaultHelloTimeout is how long after its accept a connection has to
// send its whole ClientHello. A client sends it with its first packet
// after the TCP handshake, so it takes half a round trip; one second
// leaves room for a lost packet's retransmission on links of up to a few
// hundred milliseconds (a later retransmission, or a link slower than
// that, makes the client connect again).
const DefaultHelloTimeout = time.Second

// knownAddrs bounds the addresses a gate remembers as known.
const knownAddrs = 1 << 16

// sourceBuckets bounds the per-source rate limiters a gate keeps; sources
// past it share one.
const sourceBuckets = 1 << 14

// HandshakeCPU is the slots in which strangers' TLS handshakes compute,
// shared by every TLS listener of a process. Make one with NewHandshakeCPU.
type HandshakeCPU struct {
	slots chan struct{}
}

// NewHandshakeCPU returns n slots; n <= 0 means one fewer than GOMAXPROCS
// (at least one), so that strangers' handshakes never take every P.
func NewHandshakeCPU(n int) *HandshakeCPU {
	if n <= 0 {
		n = max(1, runtime.GOMAXPROCS(0)-1)
	}
	return &HandshakeCPU{slots: make(chan struct{}, n)}
}

// HandshakeLimits are the bounds of a HandshakeGate; zero values turn a
// bound off.
type HandshakeLimits struct {
	// Listener names the listener in the metrics (listener label).
	Listener string
	// Pending is the most handshakes in progress at once; past it one of
	// the source with the most is cut for the new one (see above). Zero keeps no count: the caller
	// bounds them (the Raft port, the ops listener's places).
	Pending int
	// HelloTimeout is how long after the accept the whole ClientHello may
	// take.
	HelloTimeout time.Duration
	// Timeout bounds a wait for a turn when the handshake's caller set no
	// read deadline (it waits with a context instead): the handshake's own
	// bound.
	Timeout time.Duration
	// SourceRate is how many handshakes a second one source of strangers
	// may begin computing, and SourceBurst how many at once.
	SourceRate  rate.Limit
	SourceBurst int
	// StrangerRate and StrangerBurst are the same for all strangers
	// together (the Raft port, whose members are known by their IPs).
	StrangerRate  rate.Limit
	StrangerBurst int
	// CPU is the slots strangers' handshakes compute in; nil gives the gate
	// slots of its own (NewHandshakeCPU(0)).
	CPU *HandshakeCPU
	// KnownFor is how long a source that finished a handshake with a
	// verified client certificate stays known; zero: none does.
	KnownFor time.Duration
	// Prefixes say which addresses are one source.
	Prefixes SourcePrefixes
	// Registerer, if not nil, receives the gate's series (Register).
	Registerer prometheus.Registerer
}

// CutReason is why a gate cut a handshake (baton_handshakes_cut_total).
type CutReason int

const (
	CutPending CutReason = iota // cut for a newer one: Pending were in progress
	CutHello                    // no whole ClientHello within HelloTimeout
	CutNoTurn                   // its source's or the strangers' rate, or a CPU slot, would have come after its deadline
	cutReasons
)

var cutNames = [cutReasons]string{"pending_full", "hello_timeout", "no_turn"}

// String is the reason's label value.
func (r CutReason) String() string { return cutNames[r] }

// HandshakeGate bounds the handshakes of the listeners it wraps (see
// above). Wrap each accepted connection, and run the handshake over it
// with the configuration Config returns.
type HandshakeGate struct {
	lim      HandshakeLimits
	cpu      *HandshakeCPU
	stranger *rate.Limiter // nil: no budget for all strangers

	mu sync.Mutex
	// pending counts the handshakes in progress, and bySource holds them
	// by source, oldest first; only when lim.Pending > 0.
	pending  int
	bySource map[netip.Prefix]*list.List // of *gateConn
	known    map[netip.Addr]time.Time
	sources  map[netip.Prefix]*rate.Limiter
	overflow *rate.Limiter // for sources past sourceBuckets

	cuts [cutReasons]atomic.Uint64
	// cutLive counts the handshakes CutOldest cut that have not ended.
	cutLive atomic.Int64
}

// NewHandshakeGate returns a gate with lim.
func NewHandshakeGate(lim HandshakeLimits) *HandshakeGate {
	g := &HandshakeGate{lim: lim, cpu: lim.CPU, bySource: map[netip.Prefix]*list.List{}, known: map[netip.Addr]time.Time{}, sources: map[netip.Prefix]*rate.Limiter{}}
	if g.cpu == nil {
		g.cpu = NewHandshakeCPU(0)
	}
	if lim.StrangerRate > 0 {
		g.stranger = rate.NewLimiter(lim.StrangerRate, max(1, lim.StrangerBurst))
	}
	if lim.SourceRate > 0 {
		g.overflow = rate.NewLimiter(lim.SourceRate, max(1, lim.SourceBurst))
	}
	if lim.Registerer != nil {
		g.Register(lim.Registerer)
	}
	return g
}

// Register publishes the gate's series in reg, labelled with its
// listener: baton_handshakes_cut_total{listener,reason} and
// baton_handshakes_pending{listener}.
func (g *HandshakeGate) Register(reg prometheus.Registerer) {
	for r, name := range cutNames {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "baton_handshakes_cut_total",
			Help:        "TLS handshakes cut before they finished, by listener and reason: pending_full (cut for a newer one), hello_timeout (no whole ClientHello in time), no_turn (its source's or the strangers' rate, or a CPU slot, would have come after its deadline).",
			ConstLabels: prometheus.Labels{"listener": g.lim.Listener, "reason": name},
		}, func() float64 { return float64(g.cuts[r].Load()) }))
	}
	if g.lim.Pending > 0 {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "baton_handshakes_pending",
			Help:        "TLS handshakes in progress, on the listeners that bound them (max-pending-handshakes), by listener.",
			ConstLabels: prometheus.Labels{"listener": g.lim.Listener},
		}, func() float64 { g.mu.Lock(); defer g.mu.Unlock(); return float64(g.pending) }))
	}
}

// Cuts is how many handshakes the gate cut for reason (see CutReason).
func (g *HandshakeGate) Cuts(r CutReason) uint64 { return g.cuts[r].Load() }

// errNoTurn fails a handshake that would not get its turn before its
// deadline; the connection is closed without an alert, so that a client
// sees a dropped connection and tries again, not a refusal.
var errNoTurn = errors.New("tls handshake: no turn before its deadline (handshake rate or CPU slots of unknown clients)")

// Wrap registers c, just accepted, and returns the connection to run its
// TLS handshake over. known says that c's address is known not to be a
// stranger's (a member's IP on the Raft port). When Pending handshakes are
// in progress already, one is cut for c (its connection closed).
func (g *HandshakeGate) Wrap(c net.Conn, known bool) net.Conn {
	now := time.Now()
	addr := AddrOf(c.RemoteAddr())
	gc := &gateConn{Conn: c, g: g, addr: addr, key: g.lim.Prefixes.Key(addr), began: now, closed: make(chan struct{})}
	if g.lim.HelloTimeout > 0 {
		gc.helloDue = now.Add(g.lim.HelloTimeout)
		c.SetReadDeadline(gc.helloDue)
	}
	var victim *gateConn
	g.mu.Lock()
	gc.known = known || g.knownLocked(addr, now)
	if g.lim.Pending > 0 {
		if g.pending >= g.lim.Pending {
			victim = g.victimLocked()
			g.leaveLocked(victim)
		}
		q := g.bySource[gc.key]
		if q == nil {
			q = list.New()
			g.bySource[gc.key] = q
		}
		gc.elem = q.PushBack(gc)
		g.pending++
	}
	g.mu.Unlock()
	if victim != nil {
		g.cuts[CutPending].Add(1)
		victim.Conn.Close() // its handshake fails, and its owner closes it
	}
	return gc
}

// CutOldest cuts the handshake Wrap would cut for a new one, if any is in
// progress: for a listener out of room for a new connection. It reports
// whether one was cut; not while maxLive handshakes it cut have not ended
// yet: a connection's descriptor is freed only once its goroutine sees
// the close, and a listener that took a new one for each cut could run
// out of descriptors while a loaded machine is slow to run them.
func (g *HandshakeGate) CutOldest(maxLive int) bool {
	if g.cutLive.Load() >= int64(maxLive) {
		return false
	}
	g.mu.Lock()
	var victim *gateConn
	if g.pending > 0 {
		victim = g.victimLocked()
		g.leaveLocked(victim)
		victim.cut = true
		g.cutLive.Add(1)
	}
	g.mu.Unlock()
	if victim == nil {
		return false
	}
	g.cuts[CutPending].Add(1)
	victim.Conn.Close()
	return true
}

// victimLocked is the handshake to cut for a new one: one of the source
// with the most in progress (of several, the one whose oldest began
// first), so that a flood from some addresses cuts its own handshakes,
// not those of a client elsewhere; of its handshakes, the oldest that has
// not sent its whole ClientHello, else the oldest. g.mu must be held, and
// a handshake be pending.
func (g *HandshakeGate) victimLocked() *gateConn {
	var most *list.List
	for _, q := range g.bySource {
		if most == nil || q.Len() > most.Len() ||
			(q.Len() == most.Len() && q.Front().Value.(*gateConn).began.Before(most.Front().Value.(*gateConn).began)) {
			most = q
		}
	}
	for e := most.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*gateConn); !c.hello.Load() {
			return c
		}
	}
	return most.Front().Value.(*gateConn)
}

// leaveLocked takes c out of the handshakes in progress. g.mu must be held.
func (g *HandshakeGate) leaveLocked(c *gateConn) {
	if c.elem == nil {
		return
	}
	q := g.bySource[c.key]
	q.Remove(c.elem)
	if q.Len() == 0 {
		delete(g.bySource, c.key)
	}
	c.elem = nil
	g.pending--
}

func (g *HandshakeGate) knownLocked(addr netip.Addr, now time.Time) bool {
	if g.lim.KnownFor <= 0 || !addr.IsValid() {
		return false
	}
	at, ok := g.known[addr]
	return ok && now.Sub(at) < g.lim.KnownFor
}

// Known records that the client at conn's address finished a handshake
// with a verified client certificate: its next handshakes, for KnownFor,
// are not a stranger's. conn is the TLS connection, or any connection
// over a wrapped one.
func (g *HandshakeGate) Known(conn net.Conn) {
	gc := gateConnOf(conn)
	if gc == nil || g.lim.KnownFor <= 0 || !gc.addr.IsValid() {
		return
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.known) >= knownAddrs {
		for a, at := range g.known {
			if now.Sub(at) >= g.lim.KnownFor || len(g.known) >= knownAddrs {
				delete(g.known, a)
			}
		}
	}
	g.known[gc.addr] = now
}

// Done ends the handshake of conn (a wrapped connection, or one over it):
// it leaves the handshakes in progress and gives back its CPU slot. Its
// Close does the same.
func (g *HandshakeGate) Done(conn net.Conn) {
	if gc := gateConnOf(conn); gc != nil {
		gc.finish()
	}
}

// Config returns cfg for the handshakes over wrapped connections: once a
// ClientHello is whole, the handshake of a stranger waits for its turn
// (its source's and the strangers' rate, and a CPU slot) before it
// computes anything.
func (g *HandshakeGate) Config(cfg *tls.Config) *tls.Config {
	out := cfg.Clone()
	out.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		use := cfg
		if cfg.GetConfigForClient != nil {
			c, err := cfg.GetConfigForClient(hi)
			if err != nil {
				return nil, err
			}
			if c != nil {
				use = c
			}
		}
		gc := gateConnOf(hi.Conn)
		if gc == nil {
			return use, nil
		}
		if err := gc.helloDone(); err != nil {
			return nil, err
		}
		// A configuration of its own, whose VerifyConnection tells the
		// gate that what is left of the handshake costs little.
		per := use.Clone()
		per.GetConfigForClient = nil
		verify := use.VerifyConnection
		per.VerifyConnection = func(cs tls.ConnectionState) error {
			if verify != nil {
				if err := verify(cs); err != nil {
					return err
				}
			}
			gc.computed()
			return nil
		}
		return per, nil
	}
	return out
}

// reserve takes a handshake of key from the rate budgets, and returns how
// long the handshake must wait for it, and the reservations, to cancel if
// it will not.
func (g *HandshakeGate) reserve(key netip.Prefix, now time.Time) (time.Duration, []*rate.Reservation) {
	var rs []*rate.Reservation
	var wait time.Duration
	if g.stranger != nil {
		r := g.stranger.ReserveN(now, 1)
		rs = append(rs, r)
		wait = max(wait, r.DelayFrom(now))
	}
	if g.lim.SourceRate > 0 {
		r := g.sourceLimiter(key, now).ReserveN(now, 1)
		rs = append(rs, r)
		wait = max(wait, r.DelayFrom(now))
	}
	return wait, rs
}

// sourceLimiter is key's rate limiter.
func (g *HandshakeGate) sourceLimiter(key netip.Prefix, now time.Time) *rate.Limiter {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l, ok := g.sources[key]; ok {
		return l
	}
	if len(g.sources) >= sourceBuckets {
		// Forget the sources whose budget is whole again: they are as if new.
		for k, l := range g.sources {
			if l.TokensAt(now) >= float64(l.Burst()) {
				delete(g.sources, k)
			}
		}
		if len(g.sources) >= sourceBuckets {
			return g.overflow
		}
	}
	l := rate.NewLimiter(g.lim.SourceRate, max(1, g.lim.SourceBurst))
	g.sources[key] = l
	return l
}
