package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// security is the server's state for TLS, the access rules and the cap of
// connections per source address. Its hooks into the session's life are
// admit (accept loop), handshake (tls.go) and authorize (ACQUIRE).
type security struct {
	acl     atomic.Pointer[ACL]
	perAddr *addrLimiter // nil: no cap
	perID   *idLimiter   // nil: no cap
	// refusals limits the WARN lines of refused ACQUIREs; each is counted
	// in a metric whether or not its line is written.
	refusals *RefusalLog
}

func (sec *security) init(cfg Config) {
	sec.refusals = NewRefusalLog()
	if cfg.ACL != nil {
		sec.acl.Store(cfg.ACL)
	}
	if cfg.MaxConnsPerIP > 0 {
		sec.perAddr = &addrLimiter{max: cfg.MaxConnsPerIP, prefixes: cfg.SourcePrefixes, open: make(map[netip.Prefix]int)}
	}
	if cfg.MaxConnsPerIdentity > 0 && cfg.TLS != nil {
		sec.perID = &idLimiter{max: cfg.MaxConnsPerIdentity, open: make(map[string]int)}
	}
}

// SetACL replaces the access rules for every ACQUIRE from now on; nil
// lifts them. Sessions already in the table are not checked again.
func (s *Server) SetACL(a *ACL) { s.sec.acl.Store(a) }

// ACL returns the access rules in force, nil if none.
func (s *Server) ACL() *ACL { return s.sec.acl.Load() }

// admit is the accept loop's security hook: it applies the cap of
// connections per source address, refusing conn and returning nil past it
// (refuseOverAddress), and wraps conn in the handshake gate and TLS when
// the server speaks it (the handshake itself runs later, in the session's
// goroutine).
func (s *Server) admit(conn net.Conn) net.Conn {
	if l := s.sec.perAddr; l != nil {
		c, key, ok := l.admit(conn)
		if !ok {
			s.refuseOverAddress(conn, sourceText(key))
			return nil
		}
		conn = c
	}
	if s.cfg.TLS != nil {
		if s.sec.perID != nil {
			conn = &identityConn{Conn: conn} // counted after its handshake (admitIdentity)
		}
		conn = s.gateTLS(conn) // tlsgate.go
	}
	return conn
}

// admitIdentity applies the cap of connections per client identity to a
// session whose TLS handshake has verified its certificate: past it, the
// session is refused with ERROR OVERLOADED. A certificate shared by many
// hosts is one client, whichever addresses it comes from.
func (c *session) admitIdentity() (EndReason, string, bool) {
	s := c.srv
	l := s.sec.perID
	tc, ok := c.conn.(*tls.Conn)
	if l == nil || !ok {
		return 0, "", true
	}
	ic, ok := identityConnOf(tc.NetConn())
	ids := connIdentities(c.conn)
	if !ok || (len(ids) == 0 && len(tc.ConnectionState().VerifiedChains) == 0) {
		return 0, "", true // no verified certificate: no identity to count
	}
	// A verified certificate that names no identity counts too: all such
	// are one client (key "").
	key := strings.Join(ids, "\x00")
	if ic.hold(l, key) {
		return 0, "", true
	}
	who := identityText(ids)
	if len(ids) == 0 {
		who = "with a certificate that names no identity"
	}
	s.m.refusedPerID.Inc()
	s.sec.refusals.Warn(s.log, "session refused: its client identity has as many connections open as it may",
		"identities", ids, "remote", c.remote, "max_conns_per_identity", l.max)
	return ReasonOverloaded, fmt.Sprintf("client %s has %d connections open, the most one client identity may (max-conns-per-identity)", who, l.max), false
}

// idLimiter counts open connections per client identity (the identities
// of a verified certificate, joined).
type idLimiter struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

// identityConn is a TLS session's connection, under its tls.Conn: it is
// counted against its client's identity once the handshake has proved it,
// and gives its place back on its first Close.
type identityConn struct {
	net.Conn
	mu     sync.Mutex
	l      *idLimiter // set while it holds a place
	key    string
	closed bool
}

// identityConnOf finds the identityConn under c (the handshake gate's
// connection wraps it).
func identityConnOf(c net.Conn) (*identityConn, bool) {
	for c != nil {
		if ic, ok := c.(*identityConn); ok {
			return ic, true
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		c = w.NetConn()
	}
	return nil, false
}

// NetConn is the connection c wraps.
func (c *identityConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes when the connection can.
func (c *identityConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// hold takes a place of l for key, false if key has every place.
func (c *identityConn) hold(l *idLimiter, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return true // ends anyway: it takes nothing
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		return false
	}
	l.open[key]++
	c.l, c.key = l, key
	return true
}

// Unwrap is the connection under the count (resetConn).
func (c *identityConn) Unwrap() net.Conn { return c.Conn }

func (c *identityConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	l, key := c.l, c.key
	c.closed, c.l = true, nil
	c.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		if l.open[key]--; l.open[key] <= 0 {
			delete(l.open, key)
		}
		l.mu.Unlock()
	}
	return err
}

// authorize checks the access rules for an ACQUIRE of lock name with a
// claim of kind k, before the table is touched.
func (c *session) authorize(name string, k Kind) (EndReason, string, bool) {
	s := c.srv
	acl := s.sec.acl.Load()
	if acl == nil {
		return 0, "", true
	}
	ids := connIdentities(c.conn)
	if acl.MayClaim(ids, name, k) {
		return 0, "", true
	}
	s.m.aclRefusals.Inc()
	who := identityText(ids)
	if !acl.MayAcquire(ids, name) {
		s.sec.refusals.Warn(s.log, "acquire refused by the access rules", "lock", name, "identities", ids, "remote", c.remote)
		return ReasonUnauthorized, fmt.Sprintf("client %s may not acquire lock %q", who, name), false
	}
	s.sec.refusals.Warn(s.log, "acquire refused by the access rules: not this kind of claim", "lock", name, "kind", k.String(), "identities", ids, "remote", c.remote)
	return ReasonUnauthorized, fmt.Sprintf("client %s may not take %s on lock %q (the access rules' kinds)", who, k, name), false
}

// Refused requests are logged at most refusalBurst at once, and
// refusalRate a second after: a scanner or a misconfigured fleet can be
// refused thousands of times a second, and must not flood the log nor
// spend the server's time writing it. Their metrics count them all.
const (
	refusalBurst = 20
	refusalRate  = 1
)

// RefusalLog writes the WARN lines of refused requests, rate-limited (see
// refusalBurst); the first line written after some were dropped says how
// many (suppressed=N). The caller counts every refusal in a metric. It is
// safe for concurrent use.
type RefusalLog struct {
	lim     *rate.Limiter
	dropped atomic.Uint64
}

// NewRefusalLog returns a RefusalLog with the server's limits.
func NewRefusalLog() *RefusalLog {
	return &RefusalLog{lim: rate.NewLimiter(refusalRate, refusalBurst)}
}

// Warn writes msg with args to log at WARN level, unless the rate limit
// drops it.
func (l *RefusalLog) Warn(log *slog.Logger, msg string, args ...any) {
	if !log.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	if !l.lim.AllowN(time.Now(), 1) {
		l.dropped.Add(1)
		return
	}
	if n := l.dropped.Swap(0); n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Warn(msg, args...)
}

// addrLimiter counts open connections per source (an IP address, or an
// IPv6 prefix: see SourcePrefixes).
type addrLimiter struct {
	max      int
	prefixes SourcePrefixes
	mu       sync.Mutex
	open     map[netip.Prefix]int
}

// admit counts conn against its source, false if that source is at the
// cap. The returned connection gives the count back when closed.
func (l *addrLimiter) admit(conn net.Conn) (net.Conn, netip.Prefix, bool) {
	key := l.prefixes.KeyOf(conn.RemoteAddr())
	if !key.IsValid() {
		return conn, key, true // not an IP peer (a test pipe): nothing to count
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		return nil, key, false
	}
	l.open[key]++
	return &countedConn{Conn: conn, l: l, addr: key}, key, true
}

func (l *addrLimiter) release(addr netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
}

// countedConn gives its place back to the addrLimiter on its first Close.
type countedConn struct {
	net.Conn
	once sync.Once
	l    *addrLimiter
	addr netip.Prefix
}

// Unwrap is the connection under the count (resetConn).
func (c *countedConn) Unwrap() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// CloseWrite half-closes when the connection can (the session's ERROR is
// followed by a FIN, not a RST).
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
