package cluster

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// The accept side of the Raft port: who gets a handshake, and what a
// connection that never finishes one can cost.
//
// Every accepted connection runs its handshake in a goroutine of its own
// before Raft sees it: over TLS a member's certificate, on plain TCP its
// first byte (Raft and the founders' question write as soon as they
// dial), within handshakeTimeout. A flood of connections that never
// finish one must not keep members out, or every leader change becomes an
// outage: the new leader cannot open its connections. Members dial from
// the IP of their own Raft address (Dial binds it), so handshakes are
// counted by source IP, in two classes:
//
//   - a member's IP (a current member's Raft address, or a configured
//     peer's: the founders, a -join node's -peers) has room of its own,
//     memberHandshakes for each member there, which no other address can
//     take. When that room is full a handshake there is ended for the
//     new one: a flood from the member's own IP (another process on its
//     host) can delay the member's handshake, never lock it out.
//   - any other IP, a stranger's, may hold strangerHandshakesPerIP, fewer
//     than one member's share; more are closed at once. All strangers
//     share strangerHandshakes, and when those are taken a stranger's
//     handshake is ended for the new one, so that a stranger that
//     completes its handshake quickly (a member whose IP is not the one
//     it is known by: behind NAT, or a host name that does not resolve
//     here) still gets through.
//
// The handshake ended for a new one is the oldest that has not sent a
// byte (a member's sends its first at once), else the oldest.
//
// A stranger is not refused Raft for being one: over TLS its certificate
// decides, and on plain TCP anyone who reaches the port is the cluster.
//
// Over TLS a stranger's handshake also costs CPU once its ClientHello is
// whole (the key exchange and this node's signature), which a peer that
// replays a captured ClientHello pays nothing for: enough of them starve
// Raft's heartbeats, and the cluster elects again and again. So the
// handshakes of strangers go through a server.HandshakeGate: a whole
// ClientHello within a second of the accept, then at most
// raftStrangerRate a second in all (raftSourceRate from one address),
// computing in the process's CPU slots for strangers, which leave Raft a
// P. Members' IPs wait for nothing: a member needs few handshakes, and
// never waits behind strangers.
const (
	handshakeTimeout        = 2 * time.Second
	memberHandshakes        = 8 // for each member at an IP; its Raft pool and heartbeats need a few
	strangerHandshakesPerIP = 4
	strangerHandshakes      = 64
	// maxInbound caps the open inbound connections from members' IPs
	// (members open a few each: Raft's pool), and maxStrangerInbound those
	// from other IPs, so that connections from strangers that pass their
	// handshake (anyone's, on plain TCP) never take the members' room.
	maxInbound         = 256
	maxStrangerInbound = 64
	// raftStrangerRate is how many handshakes a second strangers begin in
	// all (a burst of as many), and raftSourceRate from one address (twice
	// as many at once): a member behind NAT needs a few, a flood gets few.
	raftStrangerRate = 16
	raftSourceRate   = 4
)

var errTooManyInbound = errors.New("raft: too many open connections from this class of address")

// refusal is why the Raft port closed a connection before Raft saw it
// (baton_cluster_raft_refusals_total).
type refusal int

const (
	refusedAddressShare  refusal = iota // a stranger's IP had its handshakes: closed at once
	refusedOpen                         // its class of IP had its open connections
	refusedEndedForNewer                // its handshake made room for a newer one
	refusedHandshake                    // its handshake failed or timed out
	refusedQuestion                     // the founders' question from an IP that is no founder's or member's
	refusals
)

var refusalNames = [refusals]string{"address_share", "open_connections", "ended_for_newer", "handshake_failed", "question"}

// handshake is one inbound connection in its handshake.
type handshake struct {
	raw      *watchConn // what was accepted; closing it ends the handshake
	conn     net.Conn   // raw, or the TLS server over it
	ip       netip.Addr
	stranger bool
	// atIP and inStrangers are its places in gate's lists; nil once it
	// has ended (done, or ended for a newer one).
	atIP, inStrangers *list.Element
}

// gate is the handshakes in progress and the open inbound connections,
// by class; stream.mu guards it.
type gate struct {
	byIP      map[netip.Addr]*list.List // of *handshake, oldest first
	strangers list.List                 // of *handshake, oldest first
	inbound   [2]int                    // open admitted connections, by connKind (inboundMember, inboundStranger)
}

// connKind is what a tracked connection is, for the counts of gate.
type connKind int8

const (
	inboundMember connKind = iota
	inboundStranger
	outbound
)

// acceptLoop accepts connections and hands each to a goroutine of its own
// that runs its handshake within the bounds above; the accept loop itself
// never waits for a peer.
func (s *stream) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-s.done:
				return
			}
			continue
		}
		backoff = 0
		h, ended := s.startHandshake(&watchConn{Conn: c})
		if ended != nil {
			ended.Close() // its goroutine sees the handshake fail, and ends
		}
		if h == nil {
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			tc, err := s.admitInbound(h)
			if err != nil {
				c.Close()
				return
			}
			select {
			case s.admitted <- tc:
			case <-s.done:
				tc.Close()
			}
		}()
	}
}

func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// startHandshake gives c a place among the handshakes, or nil if its IP
// may not have another (a stranger's share is taken, or too many
// connections of its class are open). ended, if not nil, is the
// connection whose handshake was ended to make room: the caller closes it.
func (s *stream) startHandshake(c *watchConn) (h *handshake, ended net.Conn) {
	ip := remoteIP(c)
	members := s.membersAt(ip, s.names.cached) // before mu: it reads the configuration
	if memberRoomOff() {
		members = 0
	}
	if members == 0 {
		// A stranger's share is its source's: an IPv6 host has a /64.
		ip = s.prefixes.Key(ip).Masked().Addr()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil
	}
	q := s.gate.byIP[ip]
	h = &handshake{raw: c, conn: c, ip: ip, stranger: members == 0}
	if members > 0 {
		if s.gate.inbound[inboundMember] >= maxInbound {
			s.refused[refusedOpen].Add(1)
			return nil, nil
		}
		if q != nil && q.Len() >= members*memberHandshakes {
			ended = s.endLocked(victim(q))
		}
	} else {
		switch {
		case s.gate.inbound[inboundStranger] >= maxStrangerInbound:
			s.refused[refusedOpen].Add(1)
			return nil, nil
		case q != nil && q.Len() >= strangerHandshakesPerIP:
			s.refused[refusedAddressShare].Add(1)
			return nil, nil
		}
		if s.gate.strangers.Len() >= strangerHandshakes {
			if strangerEvictionOff() {
				return nil, nil
			}
			ended = s.endLocked(victim(&s.gate.strangers))
		}
		h.inStrangers = s.gate.strangers.PushBack(h)
	}
	if ended != nil {
		s.refused[refusedEndedForNewer].Add(1)
	}
	q = s.gate.byIP[ip] // again: the one ended may have been ip's last
	if q == nil {
		q = list.New()
		s.gate.byIP[ip] = q
	}
	h.atIP = q.PushBack(h)
	if s.tls != nil {
		// A stranger's handshake computes in its turn (raftHandshakes).
		h.conn = tls.Server(s.hs.Wrap(c, !h.stranger || strangerRateOff()), s.serverCfg)
	}
	return h, ended
}

// victim is the handshake of q (oldest first) to end for a new one: the
// oldest that has not sent a byte, else the oldest.
func victim(q *list.List) *handshake {
	for e := q.Front(); e != nil; e = e.Next() {
		if h := e.Value.(*handshake); !h.raw.spoke.Load() {
			return h
		}
	}
	return q.Front().Value.(*handshake)
}

// endLocked takes h out of the handshakes and returns its connection.
// s.mu must be held.
func (s *stream) endLocked(h *handshake) net.Conn {
	if h.atIP == nil {
		return nil
	}
	q := s.gate.byIP[h.ip]
	q.Remove(h.atIP)
	if q.Len() == 0 {
		delete(s.gate.byIP, h.ip)
	}
	if h.inStrangers != nil {
		s.gate.strangers.Remove(h.inStrangers)
	}
	h.atIP, h.inStrangers = nil, nil
	return h.raw
}

// endHandshake takes h out of the handshakes; false if it was ended
// already (for a newer one: its connection is closed).
func (s *stream) endHandshake(h *handshake) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endLocked(h) != nil
}

// errEnded is the end of a handshake that made room for a newer one.
var errEnded = errors.New("raft: handshake ended to make room for a newer one")

// admitInbound runs an accepted connection's handshake, which ends its
// place among the handshakes, and tracks it.
func (s *stream) admitInbound(h *handshake) (net.Conn, error) {
	c, peer, err := runHandshake(h)
	if s.hs != nil {
		s.hs.Done(h.conn)
	}
	// Out of the handshakes before Raft gets it: from here on no newer
	// connection can end it.
	if !s.endHandshake(h) {
		return nil, errEnded
	}
	if err != nil {
		s.refused[refusedHandshake].Add(1)
		return nil, err
	}
	kind := inboundMember
	if h.stranger {
		kind = inboundStranger
	}
	t, err := s.track(c, peer, kind)
	if err != nil {
		return nil, err
	}
	t.(*trackedConn).inbound = true
	return t, nil
}

// runHandshake is h's handshake, within handshakeTimeout: over TLS it
// checks the peer's certificate (serverTLS) and returns the node it
// names; on plain TCP the first byte must come. It returns the connection
// to give Raft.
func runHandshake(h *handshake) (net.Conn, string, error) {
	// Through the TLS connection: the gate under it keeps its ClientHello's
	// shorter deadline.
	h.conn.SetDeadline(time.Now().Add(handshakeTimeout))
	defer h.conn.SetDeadline(time.Time{})
	if tc, ok := h.conn.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return nil, "", err
		}
		peer, _ := NodeIdentity(tc.ConnectionState().PeerCertificates[0]) // verified in the handshake
		return tc, peer, nil
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(h.conn, first); err != nil {
		return nil, "", err
	}
	return &prefixConn{Conn: h.conn, first: first}, "", nil
}

// watchConn notes whether its peer has sent anything.
type watchConn struct {
	net.Conn
	spoke atomic.Bool
}

func (w *watchConn) Read(b []byte) (int, error) {
	n, err := w.Conn.Read(b)
	if n > 0 && !w.spoke.Load() {
		w.spoke.Store(true)
	}
	return n, err
}

// prefixConn gives back the bytes read to see a plain connection speak
// before the rest.
type prefixConn struct {
	net.Conn
	first []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.first) > 0 {
		n := copy(b, p.first)
		p.first = p.first[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// membersAt counts the members other than this node whose Raft address
// is at ip: the current configuration's, and the configured peers'
// (-peers: the founders, or the members a -join node was given). lookup
// gives the IPs of a host name.
func (s *stream) membersAt(ip netip.Addr, lookup func(host string) []netip.Addr) int {
	if !ip.IsValid() {
		return 0
	}
	at := map[string]bool{}
	check := func(id, addr string) {
		if id == s.self || at[id] {
			return
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return
		}
		if a, err := netip.ParseAddr(host); err == nil {
			at[id] = a.Unmap().WithZone("") == ip
			return
		}
		for _, a := range lookup(host) {
			if a == ip {
				at[id] = true
				return
			}
		}
	}
	if m := s.membership(); m != nil {
		for _, srv := range m() {
			check(string(srv.ID), string(srv.Address))
		}
	}
	for _, p := range s.peers {
		check(p.ID, p.RaftAddr)
	}
	n := 0
	for _, ok := range at {
		if ok {
			n++
		}
	}
	return n
}

// helloAllowed says whether the founders' question (bootstrap.go) that
// arrived on the accepted connection c may be answered. Over TLS the
// handshake admitted only members (and answerHello checks that the
// question names the certificate's node). On plain TCP nothing proves who
// asks, and the answer tells the cluster id and who leads: only a founder
// or a member asks, from the IP of its Raft address, so only such an IP
// is answered.
func (s *stream) helloAllowed(c net.Conn) bool {
	if s.tls != nil || s.membersAt(remoteIP(c), s.names.resolve) > 0 {
		return true
	}
	s.refused[refusedQuestion].Add(1)
	return false
}

// How long a resolved host name is used, and how long a lookup may take.
const (
	nameRefresh = 30 * time.Second
	nameTimeout = 2 * time.Second
)

// nameCache resolves the host names of members' Raft addresses, so that
// the accept loop can tell a member's IP without waiting on DNS: it uses
// what was resolved last (run refreshes it), and a name not resolved yet
// counts as no IP until it is.
type nameCache struct {
	mu     sync.Mutex
	ips    map[string][]netip.Addr
	wanted map[string]bool // every name asked for: run resolves them
	wake   chan struct{}   // a name was asked for that is not known
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

func newNameCache() *nameCache {
	return &nameCache{ips: map[string][]netip.Addr{}, wanted: map[string]bool{}, wake: make(chan struct{}, 1),
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}}
}

// cached returns host's IPs as last resolved; a name not resolved yet is
// resolved by run soon, and has none meanwhile.
func (n *nameCache) cached(host string) []netip.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	ips, ok := n.ips[host]
	if !ok && !n.wanted[host] {
		n.wanted[host] = true
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
	return ips
}

// resolve returns host's IPs, resolving it now if it was never resolved.
func (n *nameCache) resolve(host string) []netip.Addr {
	n.mu.Lock()
	ips, ok := n.ips[host]
	n.wanted[host] = true
	n.mu.Unlock()
	if ok {
		return ips
	}
	ctx, cancel := context.WithTimeout(context.Background(), nameTimeout)
	defer cancel()
	return n.store(ctx, host)
}

// store resolves host and keeps its IPs; on failure it keeps what was
// known.
func (n *nameCache) store(ctx context.Context, host string) []netip.Addr {
	found, err := n.lookup(ctx, host)
	if err != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.ips[host]
	}
	ips := make([]netip.Addr, 0, len(found))
	for _, a := range found {
		ips = append(ips, a.Unmap().WithZone(""))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ips[host] = ips
	return ips
}

// run resolves every wanted name when one is new, and all of them again
// every nameRefresh, until done is closed (a lookup under way ends within
// nameTimeout).
func (n *nameCache) run(done <-chan struct{}) {
	tick := time.NewTicker(nameRefresh)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-n.wake:
		case <-tick.C:
		}
		n.mu.Lock()
		var names []string
		for h := range n.wanted {
			names = append(names, h)
		}
		n.mu.Unlock()
		for _, h := range names {
			ctx, cancel := context.WithTimeout(context.Background(), nameTimeout)
			n.store(ctx, h)
			cancel()
		}
	}
}
