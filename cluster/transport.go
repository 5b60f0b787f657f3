package cluster

import (
	"container/list"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/server"
)

// Raft transport pool and I/O bounds.
const (
	transportPool    = 3
	transportTimeout = 10 * time.Second
)

// A node's certificate names the node by one URI SAN of this form:
// baton://node/<node-id>. It is what a Raft peer, and a follower sending
// an ops request on to the leader, must prove; a certificate without it
// (every lock client's) never speaks Raft, whichever CA signed it.
const (
	nodeURIScheme = "baton"
	nodeURIHost   = "node"
)

// NodeURI is the URI SAN that names node id in its certificate.
func NodeURI(id string) string {
	return (&url.URL{Scheme: nodeURIScheme, Host: nodeURIHost, Path: "/" + id}).String()
}

// NodeIdentity is the node id that cert names in its URI SAN
// baton://node/<id>. A certificate that names no node, or more than one,
// has no node identity.
func NodeIdentity(cert *x509.Certificate) (string, error) {
	id := ""
	for _, u := range cert.URIs {
		if u.Scheme != nodeURIScheme || u.Host != nodeURIHost {
			continue
		}
		name, ok := nodeName(u)
		if !ok {
			return "", fmt.Errorf("certificate %q: URI SAN %q is not %s", cert.Subject.CommonName, u.String(), NodeURI("<node-id>"))
		}
		if id != "" {
			return "", fmt.Errorf("certificate %q names two nodes, %q and %q", cert.Subject.CommonName, id, name)
		}
		id = name
	}
	if id == "" {
		return "", fmt.Errorf("certificate %q names no node (a URI SAN %s)", cert.Subject.CommonName, NodeURI("<node-id>"))
	}
	return id, nil
}

func nodeName(u *url.URL) (string, bool) {
	if u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || len(u.Path) < 2 || u.Path[0] != '/' {
		return "", false
	}
	return u.Path[1:], true
}

// verifyNode checks a peer's certificate chain against the cluster's CA
// and returns the node it names. Any extended key usage is accepted: one
// node certificate serves as TLS server (accepting) and client (dialing),
// and it is often issued for server use only; the node identity, not the
// key usage, is what admits a peer.
func verifyNode(chain []*x509.Certificate, roots *x509.CertPool) (string, error) {
	if len(chain) == 0 {
		return "", errors.New("the peer sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return "", fmt.Errorf("peer certificate not from the cluster's CA: %w", err)
	}
	return NodeIdentity(chain[0])
}

// ownIdentity checks that this node's certificate names it.
func ownIdentity(c *tls.Config, nodeID string) error {
	if len(c.Certificates) == 0 || len(c.Certificates[0].Certificate) == 0 {
		return errors.New("raft tls: no certificate for this node")
	}
	leaf := c.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificates[0].Certificate[0]); err != nil {
			return fmt.Errorf("raft tls: this node's certificate: %w", err)
		}
	}
	id, err := NodeIdentity(leaf)
	switch {
	case err != nil:
		return fmt.Errorf("raft tls: %w: the other nodes would refuse node %q", err, nodeID)
	case id != nodeID:
		return fmt.Errorf("raft tls: this node is %q but its certificate names node %q (%s)", nodeID, id, NodeURI(id))
	}
	return nil
}

// membership reports the current members (the latest configuration, so a
// member being added is admitted as soon as the leader starts adding it).
type membership func() []raft.Server

func raftMembers(r *raft.Raft) membership {
	return func() []raft.Server { return r.GetConfiguration().Configuration().Servers }
}

// errNoMembership is the refusal before Raft runs: nothing is admitted
// until the configuration can be read.
var errNoMembership = errors.New("raft tls: the membership is not known yet")

// admit decides whether node id may speak Raft with this node. A node
// with a configuration (every founder, from its -peers, and every node
// with state) admits only its members; dialing, the member at the dialed
// address. A node waiting to join has none yet and admits any node
// certificate, the leader that will add it among them; client
// certificates never, since they name no node.
func admit(members membership, id, dialed string) error {
	if members == nil {
		return errNoMembership
	}
	servers := members()
	if len(servers) == 0 {
		return nil
	}
	if dialed == "" {
		for _, s := range servers {
			if string(s.ID) == id {
				return nil
			}
		}
		return fmt.Errorf("raft tls: node %q is not a member", id)
	}
	for _, s := range servers {
		if string(s.Address) == dialed {
			if string(s.ID) == id {
				return nil
			}
			return fmt.Errorf("raft tls: %s is member %q's address, but the certificate there names node %q", dialed, s.ID, id)
		}
	}
	return fmt.Errorf("raft tls: %s is no member's address (its certificate names node %q)", dialed, id)
}

// stillMember reports whether an admitted peer is still a member: a
// connection of a member that has been removed is closed at its next read.
func stillMember(members membership, id string) error {
	if members == nil {
		return errNoMembership
	}
	servers := members()
	if len(servers) == 0 {
		return nil
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return nil
		}
	}
	return fmt.Errorf("raft tls: node %q is no longer a member", id)
}

// raftTransport is Raft's NetworkTransport over a stream that checks
// peers against the membership once Raft runs (follow).
type raftTransport struct {
	*raft.NetworkTransport
	stream *stream
}

// follow makes the stream admit the members of r's configuration. Open
// calls it once Raft exists; until then no peer is admitted, but for the
// founders while they are asked whether to bootstrap (beforeRaft). While
// r has no configuration yet (a node waiting to be added, or a founder
// that started after the others formed the cluster), it admits the nodes
// of fallback: the -peers it was given. Only a node given none admits any
// node certificate then (Config.Validate refuses that over TLS).
func (t *raftTransport) follow(r *raft.Raft, fallback []Peer) {
	servers := peerServers(fallback)
	m := membership(func() []raft.Server {
		if conf := r.GetConfiguration().Configuration().Servers; len(conf) > 0 {
			return conf
		}
		return servers
	})
	t.stream.members.Store(&m)
}

func peerServers(peers []Peer) []raft.Server {
	var servers []raft.Server
	for _, p := range peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(memberAddr(p.RaftAddr))})
	}
	return servers
}

// advertisedAddr is the address a node gives Raft as its own: host:port
// as written, a DNS name included.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// beforeRaft makes the stream admit the nodes of peers (the founders) while
// a node with no state asks them whether the cluster exists, and answer
// their same question: no state here.
func (t *raftTransport) beforeRaft(peers []Peer) {
	servers := peerServers(peers)
	m := membership(func() []raft.Server { return servers })
	t.stream.members.Store(&m)
}

// answerHellos makes the stream answer hellos with a.
func (t *raftTransport) answerHellos(a helloAnswerer) { t.stream.hello.Store(&a) }

// newTransport is plain TCP, or mutual TLS when cfg.TLS is set: anyone who
// reaches an unprotected Raft port can vote, append log entries and read
// the replicated state. Over TLS only current members speak Raft.
func newTransport(cfg Config, logger hclog.Logger) (raft.Transport, error) {
	if cfg.TLS != nil {
		if err := ownIdentity(cfg.TLS, cfg.NodeID); err != nil {
			return nil, err
		}
	}
	// Raft's own address (in its RPCs' headers) is the advertised one as
	// written, the same string as in the membership: a name is not
	// resolved here, but at every dial (Dial).
	adv := advertisedAddr(memberAddr(cfg.advertised()))
	st := &stream{adv: adv, tls: cfg.TLS, self: cfg.NodeID, peers: cfg.Peers, names: newNameCache(), prefixes: cfg.SourcePrefixes,
		conns: map[net.Conn]connKind{}, gate: gate{byIP: map[netip.Addr]*list.List{}},
		admitted: make(chan net.Conn), done: make(chan struct{})}
	if la, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr); err == nil && la.IP != nil && !la.IP.IsUnspecified() {
		// Members are told apart by the IP they dial from (accept.go):
		// dial from the IP of this node's Raft listener, whichever
		// interface the route to a peer would pick. A listener on
		// 0.0.0.0 (a node named by DNS) dials from the routed address,
		// which is the one its name resolves to.
		st.source = &net.TCPAddr{IP: la.IP, Zone: la.Zone}
	}
	if cfg.TLS != nil {
		st.hs = server.NewHandshakeGate(server.HandshakeLimits{
			Listener:      "raft",
			HelloTimeout:  server.DefaultHelloTimeout,
			Timeout:       handshakeTimeout,
			SourceRate:    raftSourceRate,
			SourceBurst:   2 * raftSourceRate,
			StrangerRate:  raftStrangerRate,
			StrangerBurst: raftStrangerRate,
			CPU:           cfg.HandshakeCPU,
			Prefixes:      cfg.SourcePrefixes,
		})
		st.serverCfg = st.hs.Config(st.serverTLS())
	}
	var err error
	st.ln, err = net.Listen("tcp", cfg.RaftAddr) // the accept loop runs TLS over each connection
	if err != nil {
		return nil, fmt.Errorf("raft listener %s: %w", cfg.RaftAddr, err)
	}
	st.wg.Add(2)
	go st.acceptLoop()
	go func() { defer st.wg.Done(); st.names.run(st.done) }()
	return &raftTransport{NetworkTransport: raft.NewNetworkTransportWithLogger(st, transportPool, transportTimeout, logger), stream: st}, nil
}

// stream is Raft's raft.StreamLayer: plain TCP, or mutual TLS 1.3 in which
// both sides present a node certificate of the cluster's CA (tls.RootCAs)
// and admit the other only if it names a current member (admit). It keeps
// every connection, accepted or dialed, so that Close ends them all:
// raft's NetworkTransport closes only its listener, and a peer that never
// closes would keep a reader goroutine for ever.
type stream struct {
	ln     net.Listener
	adv    net.Addr
	source *net.TCPAddr // what Dial binds: the IP of adv (nil if adv's is unspecified)
	tls    *tls.Config
	// serverCfg is serverTLS() through hs, for accepted connections (both
	// nil on plain TCP).
	serverCfg *tls.Config
	hs        *server.HandshakeGate
	members   atomic.Pointer[membership] // nil until Raft runs (or the founders are asked)
	// peers are the configured ones (-peers); names resolves the host
	// names of members' addresses. Both tell members' IPs (accept.go).
	peers []Peer
	names *nameCache
	// prefixes say which addresses are one stranger (accept.go).
	prefixes server.SourcePrefixes
	// self is this node's id; hello answers the founders' question
	// (bootstrap.go) on accepted connections.
	self  string
	hello atomic.Pointer[helloAnswerer]

	// admitted carries accepted connections whose handshake passed (a
	// member's certificate over TLS, the first byte on plain TCP) to
	// Accept; acceptLoop owns the listener.
	admitted chan net.Conn
	done     chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]connKind
	gate   gate
	// certRefused is what dialed connections saw: who refused this node's
	// certificate (removed.go).
	certRefused certRefusals

	refused [refusals]atomic.Uint64
}

func (s *stream) membership() membership {
	if m := s.members.Load(); m != nil {
		return *m
	}
	return nil
}

// serverTLS is the accepting side: the dialing node's certificate must
// chain to the cluster's CA and name a current member.
func (s *stream) serverTLS() *tls.Config {
	c := s.tls.Clone()
	c.MinVersion = tls.VersionTLS13
	c.ClientAuth = tls.RequireAnyClientCert
	c.SessionTicketsDisabled = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := verifyNode(cs.PeerCertificates, s.tls.RootCAs)
		if err != nil {
			return fmt.Errorf("raft tls: %w", err)
		}
		return admit(s.membership(), id, "")
	}
	return c
}

// clientTLS is the dialing side for addr: the accepting node's
// certificate must chain to the cluster's CA and name the member at addr.
// The node id, not the host name, is what the peer proves, so Go's host
// name check is replaced by that one.
func (s *stream) clientTLS(addr string) *tls.Config {
	c := s.tls.Clone()
	c.MinVersion = tls.VersionTLS13
	c.InsecureSkipVerify = true // VerifyConnection checks the chain and the node
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := verifyNode(cs.PeerCertificates, s.tls.RootCAs)
		if err != nil {
			return fmt.Errorf("raft tls: %s: %w", addr, err)
		}
		return admit(s.membership(), id, addr)
	}
	return c
}

func (s *stream) track(c net.Conn, peer string, kind connKind) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	// Checked again here, once the handshake is done: many may have
	// started while the count was low.
	if (kind == inboundMember && s.gate.inbound[kind] >= maxInbound) || (kind == inboundStranger && s.gate.inbound[kind] >= maxStrangerInbound) {
		s.refused[refusedOpen].Add(1)
		c.Close()
		return nil, errTooManyInbound
	}
	s.conns[c] = kind
	if kind != outbound {
		s.gate.inbound[kind]++
	}
	return &trackedConn{Conn: c, s: s, peer: peer}, nil
}

func (s *stream) Accept() (net.Conn, error) {
	select {
	case c := <-s.admitted:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait() // the accept loop, handshakes within handshakeTimeout, a name lookup within nameTimeout
	return err
}

func (s *stream) Addr() net.Addr { return s.adv }

// Dial connects to the member at addr, the address as the membership has
// it: a DNS name is resolved by this dial (the Dialer), never cached, so a
// member that comes back at a new IP under its name is reached there. Over
// TLS the member is checked by the node id its certificate names against
// the member at addr (clientTLS), never by the host name or IP.
func (s *stream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.source != nil {
		d.LocalAddr = s.source
	}
	if s.tls == nil {
		c, err := d.Dial("tcp", string(addr))
		if err != nil {
			return nil, err
		}
		return s.track(c, "", outbound)
	}
	c, err := tls.DialWithDialer(d, "tcp", string(addr), s.clientTLS(string(addr)))
	if err != nil {
		return nil, err
	}
	peer, _ := NodeIdentity(c.ConnectionState().PeerCertificates[0]) // verified in the handshake
	t, err := s.track(c, peer, outbound)
	if err == nil {
		t.(*trackedConn).dialedTLS = true
	}
	return t, err
}

// trackedConn leaves its stream's set when closed. Over TLS it knows its
// peer's node id (the handshake, inbound in acceptLoop, outbound in Dial,
// is done before Raft gets the connection); every read and write checks
// that the peer is still a member.
type trackedConn struct {
	net.Conn
	s *stream

	peer string
	// inbound is set on accepted connections until their first read, which
	// may be a founder's hello instead of Raft (see bootstrap.go).
	inbound bool
	// dialedTLS: dialed over TLS; its reads tell whether the peer admits
	// this node (removed.go).
	dialedTLS bool
}

func (c *trackedConn) ready() error { return c.member() }

// member closes the connection of a peer that is no longer a member.
func (c *trackedConn) member() error {
	if c.peer == "" {
		return nil
	}
	if err := stillMember(c.s.membership(), c.peer); err != nil {
		c.Close()
		return err
	}
	return nil
}

// Read checks the membership after the read as well: a read that was
// waiting when the peer was removed must not deliver its next RPC.
func (c *trackedConn) Read(b []byte) (int, error) {
	if err := c.ready(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if c.dialedTLS {
		c.s.noteOutbound(c.peer, n, err)
	}
	if n > 0 {
		if merr := c.member(); merr != nil {
			return 0, merr
		}
	}
	if c.inbound && n > 0 {
		c.inbound = false
		if b[0] == helloMagic {
			if c.s.helloAllowed(c.Conn) {
				answerHello(c.Conn, b[1:n], c.peer, &c.s.hello, c.s.self)
			}
			c.Close()
			return 0, io.EOF // Raft's reader ends quietly at EOF
		}
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	if err := c.ready(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	if kind, ok := c.s.conns[c.Conn]; ok {
		delete(c.s.conns, c.Conn)
		if kind != outbound {
			c.s.gate.inbound[kind]--
		}
	}
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// ForwardTLS returns the TLS configurations of the channel on which a
// follower's ops API sends requests on to the leader's: the leader's side
// (server), which its ops listener takes for a handshake that offers the
// application protocol (ALPN) proto, and the follower's (client), which
// offers it. Each side presents this node's certificate and admits only a
// current member's, as Raft does, so the caller's identity that a
// follower passes on can come from a member only, and a request is sent
// on to a member only. The channel then speaks HTTP/1.1. Both are nil
// without Raft TLS.
func (n *Node) ForwardTLS(proto string) (server, client *tls.Config) {
	if n.cfg.TLS == nil {
		return nil, nil
	}
	verify := func(cs tls.ConnectionState) error {
		_, err := n.Member(&cs)
		return err
	}
	server = n.cfg.TLS.Clone()
	server.MinVersion = tls.VersionTLS13
	server.ClientAuth = tls.RequireAnyClientCert
	server.SessionTicketsDisabled = true
	server.NextProtos = []string{"http/1.1"}
	server.VerifyConnection = verify
	client = n.cfg.TLS.Clone()
	client.MinVersion = tls.VersionTLS13
	client.NextProtos = []string{proto, "http/1.1"}
	client.InsecureSkipVerify = true // VerifyConnection checks the chain and the node
	client.VerifyConnection = verify
	return server, client
}

// Member is the current member whose node certificate the TLS connection
// cs presented, checked against the cluster's CA and the membership now
// (not only at the handshake: a removed member's open connection stops
// counting).
func (n *Node) Member(cs *tls.ConnectionState) (string, error) {
	if n.cfg.TLS == nil {
		return "", errors.New("raft speaks no TLS: no node can prove it is a member")
	}
	if cs == nil {
		return "", errors.New("not a TLS connection")
	}
	id, err := verifyNode(cs.PeerCertificates, n.cfg.TLS.RootCAs)
	if err != nil {
		return "", err
	}
	servers, err := n.members()
	if err != nil {
		return "", err
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return id, nil
		}
	}
	return "", fmt.Errorf("node %q is not a member", id)
}
