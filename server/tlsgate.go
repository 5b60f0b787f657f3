package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"golang.org/x/time/rate"
)

// The protocol listener's bounds on what a connection costs before it is
// anyone (see HandshakeGate), and on the descriptors its connections take.

// knownClientFor is how long a client address that finished a handshake
// with a verified certificate is known (see HandshakeLimits.KnownFor).
const knownClientFor = time.Hour

// initGate makes the protocol listener's handshake gate, when it speaks
// TLS, and its cap of open connections.
func (s *Server) initGate() {
	s.maxConns = connCap(s.cfg, FileLimit())
	if s.cfg.TLS == nil {
		return
	}
	lim := HandshakeLimits{
		Listener:     "protocol",
		Pending:      s.cfg.PendingHandshakes,
		HelloTimeout: DefaultHelloTimeout,
		Timeout:      s.cfg.IOTimeout,
		CPU:          s.cfg.HandshakeCPU,
		Prefixes:     s.cfg.SourcePrefixes,
		KnownFor:     knownClientFor, // handshakeEnded tells it only of verified certificates
		Registerer:   s.reg,
	}
	if s.cfg.HandshakeRate > 0 {
		lim.SourceRate = rate.Limit(s.cfg.HandshakeRate)
		lim.SourceBurst = max(1, int(2*s.cfg.HandshakeRate))
	}
	s.hs = NewHandshakeGate(lim)
	s.hsTLS = s.hs.Config(s.cfg.TLS)
}

// connCap is the most connections the protocol listener keeps open: the
// sessions and pendingSlack more (connections whose ACQUIRE is still to
// come), but never so many that they take the descriptors the rest of
// the process needs (KeepFDs: the ops listener's, Raft's, files'), the
// listener's spares and the server's own. fileLimit 0 is unknown.
func connCap(cfg Config, fileLimit int) int {
	n := cfg.MaxSessions + pendingSlack
	if fileLimit > 0 && cfg.KeepFDs > 0 {
		n = min(n, max(1, fileLimit-cfg.KeepFDs-cfg.ReserveFDs-ownFDs))
	}
	return n
}

// MaxConns is the most connections the protocol listener keeps open (see
// connCap); past it new ones are closed at once, after a TLS handshake in
// progress, if any, is cut for them.
func (s *Server) MaxConns() int { return s.maxConns }

// roomForOne is asked when the listener has MaxConns open: it cuts the
// TLS handshake in progress that the gate would cut for a new one, and
// reports whether it did, so that the new connection takes its place
// (its session leaves the count when its goroutine sees the close, which
// frees its descriptor). Not while half the listener's spare descriptors'
// worth of cut handshakes have not ended. mu must not be held.
func (s *Server) roomForOne() bool {
	return s.hs != nil && s.hs.CutOldest(max(1, s.cfg.ReserveFDs/2))
}

// gate wraps conn, an accepted connection of a TLS listener, in the
// handshake gate and TLS.
func (s *Server) gateTLS(conn net.Conn) net.Conn {
	return tls.Server(s.hs.Wrap(conn, false), s.hsTLS)
}

// handshakeEnded tells the gate that conn's handshake ended, and that its
// client is known when it proved a certificate.
func (s *Server) handshakeEnded(conn *tls.Conn, err error) {
	s.hs.Done(conn)
	if err == nil && connIdentities(conn) != nil {
		s.hs.Known(conn)
	}
}

// refuseOverAddress refuses conn, past its address's cap: a rate-limited
// warn line, and on plain TCP an ERROR OVERLOADED that says why, written
// without waiting (over TLS no ERROR can be sent before a handshake, which
// is what the cap saves). key is the address's source.
func (s *Server) refuseOverAddress(conn net.Conn, source string) {
	s.m.refusedPerAddr.Inc()
	max := s.sec.perAddr.max
	s.sec.refusals.Warn(s.log, "connection refused: its address has as many connections open as it may",
		"remote", conn.RemoteAddr().String(), "source", source, "max_conns_per_ip", max)
	if s.cfg.TLS == nil {
		msg := fmt.Sprintf("%d connections are open from %s, the most one address may (max-conns-per-ip)", max, source)
		refuseNow(conn, wire.AppendError(nil, wire.CodeOverloaded, msg))
	}
	conn.Close()
}

// DefaultHandshakeRate is HandshakeRate's default: far more new sessions
// a second than one host opens, but for a fleet behind one address
// coming back after a failover (and a known client is not limited), and
// few enough that a handful of addresses replaying ClientHellos cost the
// server a small share of a CPU (64 a second cost about 25 ms).
const DefaultHandshakeRate = 64
