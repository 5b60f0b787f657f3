package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
)

// loopbackSource is 127.0.0.<i>: Linux answers every 127/8 address on
// lo, so a test can connect from many source addresses.
func loopbackSource(t *testing.T, i int) net.IP {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("needs loopback addresses beyond 127.0.0.1, which only Linux answers without set-up")
	}
	return net.IPv4(127, 0, 0, byte(i))
}

// dialFrom opens a TCP connection from ip to addr.
func dialFrom(t *testing.T, ip net.IP, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stillOpen reads each of conns at once until a moment has passed (well
// inside handshakeTimeout) and counts those the node has not closed.
func stillOpen(conns ...net.Conn) int {
	var open atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(handshakeTimeout / 4))
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
				open.Add(1)
			}
		})
	}
	wg.Wait()
	return int(open.Load())
}

// openStream is a Raft port alone (no Raft behind it), over TLS when
// leaf is not nil, whose members are peers.
func openStream(t *testing.T, ca *testcerts.CA, leaf *testcerts.Leaf, self, addr string, peers []Peer) *stream {
	t.Helper()
	cfg := testConfig(self)
	cfg.RaftAddr, cfg.Peers = addr, peers
	if leaf != nil {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, RootCAs: ca.Pool()}
	}
	tr, err := newTransport(cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	rt := tr.(*raftTransport)
	rt.beforeRaft(peers)
	t.Cleanup(func() { rt.Close() })
	return rt.stream
}

// TestRaftPortStrangerShare: an address that is no member's gets
// strangerHandshakesPerIP handshakes at once, fewer than one member's
// share; past them its connections are closed at once, and those in their
// handshake are cut within handshakeTimeout.
func TestRaftPortStrangerShare(t *testing.T) {
	stranger := loopbackSource(t, 2)
	ca := testcerts.NewCA(t, "cluster CA")
	addrs := loopbackAddrs(t, 3)
	peers := []Peer{{ID: "n1", RaftAddr: addrs[0]}, {ID: "n2", RaftAddr: addrs[1]}, {ID: "n3", RaftAddr: addrs[2]}}
	st := openStream(t, ca, ca.Node(t, "n1"), "n1", addrs[0], peers)
	if strangerHandshakesPerIP >= memberHandshakes {
		t.Fatalf("a stranger's share (%d) is not below a member's (%d)", strangerHandshakesPerIP, memberHandshakes)
	}
	var idle []net.Conn
	for range strangerHandshakesPerIP + 20 {
		idle = append(idle, dialFrom(t, stranger, addrs[0]))
	}
	closed := 20 - stillOpen(idle[strangerHandshakesPerIP:]...)
	waiting := stillOpen(idle[:strangerHandshakesPerIP]...)
	if closed != 20 || waiting != strangerHandshakesPerIP {
		t.Errorf("past a stranger's share: %d of 20 closed at once (want all); within it: %d of %d waiting in their handshake (want all)", closed, waiting, strangerHandshakesPerIP)
	}
	start := time.Now()
	for _, c := range idle[:strangerHandshakesPerIP] {
		c.SetReadDeadline(time.Now().Add(3 * handshakeTimeout))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an idle connection was kept %v, past the handshake timeout %v", time.Since(start), handshakeTimeout)
		}
	}
	batontest.Eventually(t, settle, func() bool { return st.refused[refusedHandshake].Load() == strangerHandshakesPerIP },
		"handshake_failed refusals %d, want %d", st.refused[refusedHandshake].Load(), strangerHandshakesPerIP)
	if got := st.refused[refusedAddressShare].Load(); got != 20 {
		t.Errorf("address_share refusals %d, want 20", got)
	}
}

// TestRaftPortStrangersShareTheRest: when the strangers' handshakes are
// all taken, a new stranger is not refused: the oldest stranger that has
// sent nothing makes room. One that has spoken is kept.
func TestRaftPortStrangersShareTheRest(t *testing.T) {
	loopbackSource(t, 2)
	ca := testcerts.NewCA(t, "cluster CA")
	addrs := loopbackAddrs(t, 2)
	peers := []Peer{{ID: "n1", RaftAddr: addrs[0]}, {ID: "n2", RaftAddr: addrs[1]}}
	st := openStream(t, ca, ca.Node(t, "n1"), "n1", addrs[0], peers)
	// The first stranger speaks: a whole ClientHello (a part of one is cut
	// within a second), and no more.
	speaker := dialFrom(t, loopbackSource(t, 2), addrs[0])
	speaker.Write(clientHello(t))
	var idle []net.Conn
	for i := range strangerHandshakes - 1 {
		idle = append(idle, dialFrom(t, loopbackSource(t, 3+i/strangerHandshakesPerIP), addrs[0]))
	}
	if open := stillOpen(idle...); open != len(idle) {
		t.Fatalf("%d of %d strangers' connections closed while the strangers' handshakes were not all taken", len(idle)-open, len(idle))
	}
	newcomer := dialFrom(t, loopbackSource(t, 200), addrs[0])
	if stillOpen(newcomer) != 1 {
		t.Fatalf("a stranger with all %d strangers' handshakes taken: closed at once, want the oldest silent one ended instead", strangerHandshakes)
	}
	if stillOpen(idle[0]) != 0 {
		t.Error("the oldest silent stranger is still in its handshake, want it ended for the newcomer")
	}
	if !openPastFlight(speaker) {
		t.Error("the oldest stranger, which had spoken, was ended: want a silent one ended first")
	}
	if got := st.refused[refusedEndedForNewer].Load(); got != 1 {
		t.Errorf("ended_for_newer refusals %d, want 1", got)
	}
}

// raftFlooder holds idle connections that send nothing from sources to
// target, each opened again at once after the node closes one it held
// (to take its place back before a member does), or after 50 ms if it was
// closed at once.
type raftFlooder struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func floodRaftPort(t *testing.T, target string, sources []net.IP, per int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &raftFlooder{cancel: cancel}
	for _, src := range sources {
		for range per {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: time.Second}
				for ctx.Err() == nil {
					c, err := d.DialContext(ctx, "tcp", target)
					if err == nil {
						opened := time.Now()
						stop := context.AfterFunc(ctx, func() { c.Close() })
						io.Copy(io.Discard, c)
						stop()
						c.Close()
						if time.Since(opened) > 200*time.Millisecond {
							continue
						}
					}
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
		}
	}
	t.Cleanup(func() { cancel(); f.wg.Wait() })
	// Let it fill whatever bounds the port has, and hold them through a
	// round of handshake timeouts.
	time.Sleep(handshakeTimeout + handshakeTimeout/2)
}

// memberGetsThrough opens new connections with a member's certificate to
// target, each with its handshake, and counts the RPCs answered of tries.
func memberGetsThrough(t *testing.T, leaf *testcerts.Leaf, target string, tries int) int {
	t.Helper()
	ok := 0
	for range tries {
		var resp raft.AppendEntriesResponse
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: 0}
		if rawRaft(t, leaf.TLS).AppendEntries("x", raft.ServerAddress(target), req, &resp) == nil {
			ok++
		}
	}
	return ok
}

// TestRaftPortFloodLeavesMembersRoom is the review's flood in one node's
// process: idle connections that never send a certificate, 8 from each of
// 20 addresses, held on a follower's and the leader's Raft ports. A
// member's new connection still gets its handshake every time (before,
// 0 of 5), and the leader still commits.
func TestRaftPortFloodLeavesMembersRoom(t *testing.T) {
	var sources []net.IP
	for i := range 20 {
		sources = append(sources, loopbackSource(t, 2+i))
	}
	ca := testcerts.NewCA(t, "cluster CA")
	nodes, peers := tlsCluster(t, ca, 3)
	leader := waitLeading(t, nodes)
	for i := range nodes {
		floodRaftPort(t, peers[i].RaftAddr, sources, 8)
	}
	for i, n := range nodes {
		if n == leader {
			continue
		}
		if got := memberGetsThrough(t, ca.Node(t, leader.cfg.NodeID), peers[i].RaftAddr, 5); got != 5 {
			t.Errorf("member %s's new connections to %s under the flood: %d of 5 answered, want all", leader.cfg.NodeID, n.cfg.NodeID, got)
		}
	}
	if err := waitLeading(t, nodes).apply(command{Op: opJoined, Members: []string{leader.cfg.NodeID}}); err != nil {
		t.Fatalf("a write under the flood: %v", err)
	}
}

// TestRaftPortFloodFromMembersIP: the flood from the members' own IP
// (another process on a member's host; on loopback every node's) fills
// the members' room, and a member still gets through: a silent handshake
// makes way for it.
func TestRaftPortFloodFromMembersIP(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	nodes, peers := tlsCluster(t, ca, 3)
	floodRaftPort(t, peers[0].RaftAddr, []net.IP{net.IPv4(127, 0, 0, 1)}, 40)
	if got := memberGetsThrough(t, ca.Node(t, "n2"), peers[0].RaftAddr, 5); got != 5 {
		t.Errorf("member n2's new connections to n1 under a flood from the members' IP: %d of 5 answered, want all", got)
	}
	if err := waitLeading(t, nodes).apply(command{Op: opJoined, Members: []string{"n1"}}); err != nil {
		t.Fatalf("a write under the flood: %v", err)
	}
}

// TestRaftPortReservesConfiguredPeers: before Raft has a configuration,
// the configured peers' IPs have the members' room: a -join node's
// -peers, and a late founder's founders. Over TLS a flood from strangers
// fills the rest; a peer's connection from 127.0.0.3, named by host name
// in -peers, gets through because its name resolves to that IP.
func TestRaftPortReservesConfiguredPeers(t *testing.T) {
	peerIP := loopbackSource(t, 3)
	ca := testcerts.NewCA(t, "cluster CA")
	addrs := loopbackAddrs(t, 1)
	peers := []Peer{{ID: "n1", RaftAddr: "peer-host.test:7301"}, {ID: "n2", RaftAddr: "127.0.0.9:7301"}}
	cfg := testConfig("n4")
	cfg.RaftAddr, cfg.Peers, cfg.Join = addrs[0], peers, true
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Node(t, "n4").TLS}, RootCAs: ca.Pool()}
	tr, err := newTransport(cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	rt := tr.(*raftTransport)
	t.Cleanup(func() { rt.Close() })
	st := rt.stream
	st.names.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "peer-host.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.3")}, nil
		}
		return nil, fmt.Errorf("no such host %q", host)
	}
	rt.beforeRaft(nil) // a joining node: no configuration yet, only its -peers
	// The name is resolved off the accept path: asked once, known soon.
	batontest.Eventually(t, settle, func() bool {
		return st.membersAt(netip.MustParseAddr("127.0.0.3"), st.names.cached) == 1
	}, "the peer's host name never resolved")
	if n := st.membersAt(netip.MustParseAddr("127.0.0.9"), st.names.cached); n != 1 {
		t.Errorf("members at n2's IP 127.0.0.9: %d, want 1", n)
	}
	if n := st.membersAt(netip.MustParseAddr("127.0.0.1"), st.names.cached); n != 0 {
		t.Errorf("members at this node's own IP: %d, want 0 (a node never dials itself)", n)
	}
	var sources []net.IP
	for i := range 20 {
		sources = append(sources, loopbackSource(t, 10+i))
	}
	floodRaftPort(t, addrs[0], sources, 8)
	var mine []net.Conn
	for range memberHandshakes {
		mine = append(mine, dialFrom(t, peerIP, addrs[0]))
	}
	if held := stillOpen(mine...); held != memberHandshakes {
		t.Errorf("a configured peer's IP under a strangers' flood: %d of %d handshakes kept, want all", held, memberHandshakes)
	}
}

// openPlainNode opens node id with Raft on plain TCP at raftAddr.
func openPlainNode(t *testing.T, id, raftAddr string, peers []Peer) *Node {
	t.Helper()
	cfg := testConfig(id)
	cfg.RaftAddr, cfg.Peers, cfg.DataDir = raftAddr, peers, t.TempDir()
	cfg.Addr, cfg.OpsAddr = "127.0.0.1:1", "127.0.0.1:2"
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	n.Start(&nullServer{})
	t.Cleanup(func() { n.Close() })
	return n
}

// plainCluster starts the founders peers on plain TCP and waits until
// they all have the configuration.
func plainCluster(t *testing.T, peers []Peer) []*Node {
	t.Helper()
	var nodes []*Node
	for _, p := range peers {
		nodes = append(nodes, openPlainNode(t, p.ID, p.RaftAddr, peers))
	}
	batontest.Eventually(t, settle, func() bool {
		for _, n := range nodes {
			if n.Leading() {
				return true
			}
		}
		return false
	}, "no leader on plain TCP: did the founders get no answer to their question?")
	batontest.Eventually(t, settle, func() bool {
		for _, n := range nodes {
			if ms, err := n.members(); err != nil || len(ms) != len(peers) || n.fsm.get().ClusterID == "" {
				return false
			}
		}
		return true
	}, "a founder does not have the configuration")
	return nodes
}

// TestPlainRaftPortBounds: on plain TCP an idle connection is cut within
// handshakeTimeout (it never sent its first byte), and connections from
// strangers that speak and then stall (a message type, and no more) are
// at most maxStrangerInbound: the members' connections still get through.
func TestPlainRaftPortBounds(t *testing.T) {
	var sources []net.IP
	for i := range 20 {
		sources = append(sources, loopbackSource(t, 2+i))
	}
	var peers []Peer
	for i, a := range loopbackAddrs(t, 3) {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: a})
	}
	nodes := plainCluster(t, peers)

	idle := dialFrom(t, sources[0], peers[0].RaftAddr)
	idle.SetReadDeadline(time.Now().Add(3 * handshakeTimeout))
	if _, err := idle.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("an idle plain connection was kept past the handshake timeout %v", handshakeTimeout)
	}

	var stalled []net.Conn
	for i := range 320 {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: sources[i%len(sources)]}, Timeout: 5 * time.Second}).Dial("tcp", peers[0].RaftAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write([]byte{0}) // rpcAppendEntries, and then nothing
		stalled = append(stalled, c)
	}
	time.Sleep(handshakeTimeout / 2)
	open := stillOpen(stalled...)
	if open > maxStrangerInbound {
		t.Errorf("stalled connections from strangers: %d open, want at most %d", open, maxStrangerInbound)
	}
	// A member's new connection (from the members' IP, 127.0.0.1) is
	// answered, and the cluster still commits.
	var resp raft.AppendEntriesResponse
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: 0}
	if err := rawPlainRaft(t).AppendEntries("n1", raft.ServerAddress(peers[0].RaftAddr), req, &resp); err != nil {
		t.Errorf("a member's connection beside %d stalled strangers: %v, want an answer", open, err)
	}
	if err := waitLeading(t, nodes).apply(command{Op: opJoined, Members: []string{"n1"}}); err != nil {
		t.Fatalf("a write beside the stalled strangers: %v", err)
	}
}

// rawPlainRaft is hashicorp/raft's own network transport on plain TCP,
// dialing from 127.0.0.1.
func rawPlainRaft(t *testing.T) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(&plainStream{Listener: ln}, 1, 5*time.Second, io.Discard)
	t.Cleanup(func() { trans.Close() })
	return trans
}

type plainStream struct{ net.Listener }

func (plainStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// askFrom asks the founders' question at addr from ip, as node asker, on
// plain TCP: the answer, or an error if none came.
func askFrom(t *testing.T, ip net.IP, addr, asker string) (helloReply, error) {
	t.Helper()
	c := dialFrom(t, ip, addr)
	c.SetDeadline(time.Now().Add(2 * helloTimeout))
	b, _ := json.Marshal(helloAsk{Node: asker})
	if _, err := c.Write(append([]byte{helloMagic}, append(b, '\n')...)); err != nil {
		return helloReply{}, err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return helloReply{}, err
	}
	var r helloReply
	return r, json.Unmarshal(line, &r)
}

// TestPlainHelloOnlyFromFoundersAndMembers: on plain TCP the founders'
// question is answered only from the IP of a founder's or a member's Raft
// address. Anyone else learnt the cluster id and who leads from it.
// Founders on distinct addresses (127.0.0.2-4) still found the cluster:
// each asks from the IP of its own Raft address.
func TestPlainHelloOnlyFromFoundersAndMembers(t *testing.T) {
	stranger := loopbackSource(t, 20)
	var peers []Peer
	for i, a := range loopbackAddrs(t, 3) {
		_, port, _ := net.SplitHostPort(a)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: net.JoinHostPort(loopbackSource(t, 2+i).String(), port)})
	}
	nodes := plainCluster(t, peers)
	target := peers[0].RaftAddr
	if r, err := askFrom(t, stranger, target, "n2"); err == nil {
		t.Errorf("a stranger at %v asking as n2: answered (cluster %q, leader %v), want no answer", stranger, r.ClusterID, r.Leader)
	}
	if r, err := askFrom(t, net.IPv4(127, 0, 0, 1), target, "n9"); err == nil {
		t.Errorf("a stranger at 127.0.0.1 asking as n9: answered (cluster %q), want no answer", r.ClusterID)
	}
	r, err := askFrom(t, loopbackSource(t, 3), target, "n2")
	if err != nil || r.ClusterID != nodes[0].fsm.get().ClusterID || r.ClusterID == "" {
		t.Errorf("founder n2's address asking: %+v, %v; want the answer with cluster id %q", r, err, nodes[0].fsm.get().ClusterID)
	}
	st := nodes[0].transport.(*leaseTransport).Transport.(*raftTransport).stream
	if got := st.refused[refusedQuestion].Load(); got != 2 {
		t.Errorf("question refusals on n1: %d, want 2", got)
	}
}

// clientHello is the first flight of a TLS client: a ClientHello, whole.
func clientHello(t *testing.T) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// openPastFlight reads what the node sent c (its TLS flight), and reports
// whether c is then still open (see stillOpen).
func openPastFlight(c net.Conn) bool {
	buf := make([]byte, 4096)
	for {
		c.SetReadDeadline(time.Now().Add(handshakeTimeout / 4))
		if _, err := c.Read(buf); err != nil {
			return errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// TestRaftPortStrangersHandshakeRate: a stranger's handshake costs the
// node its key exchange and signature once its ClientHello is whole,
// which a peer replaying a captured one pays nothing for. 48 replayed
// from 12 addresses at once (4 each, what one address may hold) get at
// most raftStrangerRate answered at once and raftStrangerRate a second
// after; the others wait for their turn (or are cut at handshakeTimeout).
// Unlimited, all 48 are answered at once: on a loaded machine such a
// flood starved Raft's heartbeats into elections.
func TestRaftPortStrangersHandshakeRate(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	addrs := loopbackAddrs(t, 2)
	peers := []Peer{{ID: "n1", RaftAddr: addrs[0]}, {ID: "n2", RaftAddr: addrs[1]}}
	openStream(t, ca, ca.Node(t, "n1"), "n1", addrs[0], peers)
	hello := clientHello(t)
	var answered atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 48 {
		c := dialFrom(t, loopbackSource(t, 20+i/strangerHandshakesPerIP), addrs[0])
		wg.Go(func() {
			c.Write(hello)
			c.SetReadDeadline(start.Add(500 * time.Millisecond))
			var b [1]byte
			if n, _ := c.Read(b[:]); n == 1 && b[0] == 0x16 { // a ServerHello: the node computed
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	limit := raftStrangerRate + raftStrangerRate/2 + 2 // the burst, and half a second's rate
	t.Logf("48 ClientHellos replayed from 12 addresses: %d answered within 500ms", answered.Load())
	if got := int(answered.Load()); got > limit {
		t.Errorf("strangers' replayed ClientHellos answered within 500ms: %d of 48, want at most %d (raftStrangerRate)", got, limit)
	}
}
