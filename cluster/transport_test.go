package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
)

// loopbackAddrs reserves n loopback ports by binding and closing them.
func loopbackAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// openTLSNode opens node id on real loopback TCP with Raft over mutual
// TLS, presenting leaf, and stops it at the end of the test.
func openTLSNode(t *testing.T, ca *testcerts.CA, leaf *testcerts.Leaf, id, raftAddr string, peers []Peer, join bool) *Node {
	t.Helper()
	cfg := testConfig(id)
	cfg.RaftAddr, cfg.Peers, cfg.Join, cfg.DataDir = raftAddr, peers, join, t.TempDir()
	cfg.Addr, cfg.OpsAddr = "127.0.0.1:1", "127.0.0.1:2"
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, RootCAs: ca.Pool()}
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	n.Start(&nullServer{})
	t.Cleanup(func() { n.Close() })
	return n
}

// tlsCluster starts n founders over mutual TLS, each with a server-auth
// only node certificate, and waits for a serving leader.
func tlsCluster(t *testing.T, ca *testcerts.CA, n int) ([]*Node, []Peer) {
	t.Helper()
	var peers []Peer
	for i, addr := range loopbackAddrs(t, n) {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: addr})
	}
	var nodes []*Node
	for _, p := range peers {
		nodes = append(nodes, openTLSNode(t, ca, ca.Node(t, p.ID), p.ID, p.RaftAddr, peers, false))
	}
	waitLeading(t, nodes)
	// A founder started after the others formed the cluster gets the
	// configuration with the log.
	batontest.Eventually(t, settle, func() bool {
		for _, n := range nodes {
			if ms, err := n.members(); err != nil || len(ms) != len(peers) {
				return false
			}
		}
		return true
	}, "a founder does not have the configuration")
	return nodes, peers
}

func waitLeading(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var l *Node
	batontest.Eventually(t, settle, func() bool {
		for _, n := range nodes {
			if n.Leading() {
				l = n
				return true
			}
		}
		return false
	}, "no leader over mutual TLS")
	return l
}

// rawRaft is hashicorp/raft's own network transport, dialing over TLS
// with a certificate of the caller's choice and checking nothing of the
// node it reaches: what an attacker who reaches a Raft port would use.
func rawRaft(t *testing.T, cert tls.Certificate) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	trans := raft.NewNetworkTransport(&rawStream{Listener: ln, cfg: cfg}, 1, 5*time.Second, io.Discard)
	t.Cleanup(func() { trans.Close() })
	return trans
}

type rawStream struct {
	net.Listener
	cfg *tls.Config
}

func (s *rawStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), s.cfg)
}

// TestRaftTakeoverRefused is the takeover as an attacker tries it: a lock
// client's certificate from the cluster's own CA (CN worker, no node
// identity), and a node certificate of a node that is not a member, speak
// hashicorp/raft's transport to a follower's Raft port and send one
// AppendEntries with a far higher term and a forged epoch naming the
// attacker's address as the leader's. The TLS layer refuses both, and
// nothing of it is committed anywhere. A member's certificate gets an
// answer through the same code, so the refusals are the certificates'.
func TestRaftTakeoverRefused(t *testing.T) {
	ca := testcerts.NewCA(t, "one CA for everything")
	nodes, peers := tlsCluster(t, ca, 3)
	leader := waitLeading(t, nodes)
	var follower *Node
	var target raft.ServerAddress
	for i, n := range nodes {
		if n != leader {
			follower, target = n, raft.ServerAddress(peers[i].RaftAddr)
			break
		}
	}
	lastIndex, _ := strconv.ParseUint(follower.r().Stats()["last_log_index"], 10, 64)
	lastTerm, _ := strconv.ParseUint(follower.r().Stats()["last_log_term"], 10, 64)
	forgedTerm := follower.r().CurrentTerm() + 1000
	forged := &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("evil"), Addr: []byte("127.0.0.1:6666")},
		Term:         forgedTerm,
		PrevLogEntry: lastIndex, PrevLogTerm: lastTerm,
		Entries: []*raft.Log{{Index: lastIndex + 1, Term: forgedTerm, Type: raft.LogCommand,
			Data: mustJSON(t, command{Op: opEpoch, Node: "evil", Addr: "127.0.0.1:6666", OpsAddr: "127.0.0.1:6667"})}},
		LeaderCommitIndex: lastIndex + 1,
	}
	for name, leaf := range map[string]*testcerts.Leaf{
		"lock client worker":  ca.Client(t, "worker"),
		"non-member node n9":  ca.Node(t, "n9"),
		"server certificate":  ca.Server(t),
		"two node identities": ca.Issue(t, testcerts.Spec{CN: "both", URIs: []string{"baton://node/n1", "baton://node/n9"}}),
	} {
		var resp raft.AppendEntriesResponse
		err := rawRaft(t, leaf.TLS).AppendEntries("n2", target, forged, &resp)
		if err == nil {
			t.Errorf("%s: the forged AppendEntries was answered (success %v, term %d), want the TLS handshake refused", name, resp.Success, resp.Term)
		}
	}
	// Wait out a few heartbeats: a forged entry that got in would be
	// applied by now.
	time.Sleep(3 * testHeartbeat)
	for _, n := range nodes {
		if _, ok := n.fsm.get().Nodes["evil"]; ok || n.r().CurrentTerm() >= forgedTerm {
			t.Errorf("%s: the attacker's entry or term got in: term %d, nodes %v", n.cfg.NodeID, n.r().CurrentTerm(), n.fsm.get().Nodes)
		}
		if hint := n.LeaderHint(); hint == "127.0.0.1:6666" {
			t.Errorf("%s: NOT_LEADER hint is the attacker's address", n.cfg.NodeID)
		}
	}

	// A member's certificate through the same transport: an answer (a
	// stale term, so it changes nothing).
	stale := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(peers[0].RaftAddr)}, Term: 0}
	var resp raft.AppendEntriesResponse
	if err := rawRaft(t, ca.Node(t, "n1").TLS).AppendEntries("n2", target, stale, &resp); err != nil {
		t.Fatalf("a member's certificate: %v, want an answer", err)
	}
	if resp.Success || resp.Term == 0 {
		t.Errorf("a member's stale AppendEntries: success %v, term %d; want refused with the current term", resp.Success, resp.Term)
	}
}

// impostor is a TLS server that presents leaf and records what each
// connection's handshake and first read gave.
type impostor struct {
	ln net.Listener

	mu         sync.Mutex
	handshakes int // tried
	refused    int // handshake failed
	readBytes  int // application data received after a handshake
	wg         sync.WaitGroup
}

func newImpostor(t *testing.T, addr string, leaf *testcerts.Leaf) *impostor {
	t.Helper()
	ln, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, ClientAuth: tls.RequestClientCert})
	if err != nil {
		t.Fatal(err)
	}
	im := &impostor{ln: ln}
	im.wg.Add(1)
	go func() { // ends when the listener closes (Cleanup)
		defer im.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			im.wg.Add(1)
			go func() {
				defer im.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				err := c.(*tls.Conn).Handshake()
				n := 0
				if err == nil {
					n, _ = c.Read(make([]byte, 64))
				}
				im.mu.Lock()
				im.handshakes++
				if err != nil {
					im.refused++
				}
				im.readBytes += n
				im.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); im.wg.Wait() })
	return im
}

func (im *impostor) counts() (handshakes, refused, readBytes int) {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.handshakes, im.refused, im.readBytes
}

// TestRaftDialRefusesNonMember: a node that dials a member's Raft address
// (here to ask for its vote) and finds a certificate there that names no
// member, or another member than the one at that address, refuses it in
// the handshake and sends it nothing.
func TestRaftDialRefusesNonMember(t *testing.T) {
	ca := testcerts.NewCA(t, "one CA for everything")
	for name, leaf := range map[string]*testcerts.Leaf{
		"server certificate of the same CA": ca.Server(t),
		"non-member node n9":                ca.Node(t, "n9"),
		"member n1 at n2's address":         ca.Node(t, "n1"),
	} {
		t.Run(name, func(t *testing.T) {
			addrs := loopbackAddrs(t, 2)
			peers := []Peer{{ID: "n1", RaftAddr: addrs[0]}, {ID: "n2", RaftAddr: addrs[1]}}
			im := newImpostor(t, addrs[1], leaf)
			openTLSNode(t, ca, ca.Node(t, "n1"), "n1", addrs[0], peers, false)
			batontest.Eventually(t, settle, func() bool { h, _, _ := im.counts(); return h >= 2 }, "n1 never dialed n2's address")
			if h, refused, n := im.counts(); refused != h || n != 0 {
				t.Errorf("%d dials: %d refused in the handshake, %d bytes sent to the impostor; want all refused, none sent", h, refused, n)
			}
		})
	}
	// The member itself at its address is dialed and spoken to.
	addrs := loopbackAddrs(t, 2)
	peers := []Peer{{ID: "n1", RaftAddr: addrs[0]}, {ID: "n2", RaftAddr: addrs[1]}}
	im := newImpostor(t, addrs[1], ca.Node(t, "n2"))
	openTLSNode(t, ca, ca.Node(t, "n1"), "n1", addrs[0], peers, false)
	batontest.Eventually(t, settle, func() bool { _, _, n := im.counts(); return n > 0 }, "n1 sent nothing to member n2's certificate")
}

// TestRaftMembershipOverTLS: a node started with -join (no configuration)
// is added over mutual TLS and catches up; once removed, its certificate
// no longer gets through any member's handshake. A certificate of another
// CA, or none, never does.
func TestRaftMembershipOverTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	nodes, peers := tlsCluster(t, ca, 3)
	addr4 := loopbackAddrs(t, 1)[0]
	n4cert := ca.Node(t, "n4")
	n4 := openTLSNode(t, ca, n4cert, "n4", addr4, peers, true) // the current members, whom it admits until it is added
	// Before it is added, n4 is no member: refused.
	probe := func(leaf *testcerts.Leaf) error {
		var resp raft.AppendEntriesResponse
		return rawRaft(t, leaf.TLS).AppendEntries("n1", raft.ServerAddress(peers[0].RaftAddr), &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}}, &resp)
	}
	if err := probe(n4cert); err == nil {
		t.Fatal("n4 before it was added: answered, want refused")
	}
	leader := waitLeading(t, nodes)
	if err := leader.AddMember("n4", addr4); err != nil {
		t.Fatalf("add n4: %v", err)
	}
	batontest.Eventually(t, settle, func() bool { return len(n4.View().Members) == 4 && n4.fsm.get().Epoch > 0 }, "n4 never caught up over TLS")
	if err := probe(n4cert); err != nil {
		t.Fatalf("member n4: %v, want an answer", err)
	}
	// A connection n4 opened while a member, kept in its transport's pool.
	kept := rawRaft(t, n4cert.TLS)
	keptRPC := func(term uint64) error {
		var resp raft.AppendEntriesResponse
		return kept.AppendEntries("n1", raft.ServerAddress(peers[0].RaftAddr), &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: term}, &resp)
	}
	if err := keptRPC(0); err != nil {
		t.Fatalf("member n4's kept connection: %v, want an answer", err)
	}
	if err := waitLeading(t, nodes).RemoveMember("n4"); err != nil {
		t.Fatalf("remove n4: %v", err)
	}
	batontest.Eventually(t, settle, func() bool { return probe(n4cert) != nil }, "n4's certificate still gets through after its removal")
	// Its next RPC, a far higher term, is neither answered nor handled.
	forgedTerm := nodes[0].r().CurrentTerm() + 1000
	if err := keptRPC(forgedTerm); err == nil {
		t.Error("n4's connection from before its removal still carries RPCs")
	}
	if term := nodes[0].r().CurrentTerm(); term >= forgedTerm {
		t.Errorf("n1 took term %d from the removed n4's connection", term)
	}

	other := testcerts.NewCA(t, "someone else")
	for name, certs := range map[string][]tls.Certificate{"foreign CA": {other.Node(t, "n1").TLS}, "no certificate": nil} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", peers[0].RaftAddr,
			&tls.Config{Certificates: certs, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err == nil {
			// TLS 1.3: the server's verdict on the client arrives with the first read.
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("%s: got %v, want the handshake refused", name, err)
		}
	}
}

// TestOpenRefusesCertificateOfAnotherNode: a node whose certificate names
// another node, or none, does not start: its peers would refuse it.
func TestOpenRefusesCertificateOfAnotherNode(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	addr := loopbackAddrs(t, 1)[0]
	for leaf, want := range map[*testcerts.Leaf]string{
		ca.Node(t, "n2"): `this node is "n1" but its certificate names node "n2"`,
		ca.Server(t):     "names no node",
	} {
		cfg := testConfig("n1")
		cfg.RaftAddr, cfg.Peers, cfg.DataDir = addr, []Peer{{ID: "n1", RaftAddr: addr}}, t.TempDir()
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, RootCAs: ca.Pool()}
		n, err := Open(context.Background(), cfg)
		if err == nil {
			n.Close()
			t.Fatalf("open with %q: started, want %q", leaf.TLS.Leaf.Subject.CommonName, want)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("open with %q: %v, want %q", leaf.TLS.Leaf.Subject.CommonName, err, want)
		}
	}
}

// TestForwardChannel: the ops forward channel's handshakes admit a
// current member on both sides and nothing else: a lock client's
// certificate cannot open it to the leader, and a follower does not send
// on to a server whose certificate names no member.
func TestForwardChannel(t *testing.T) {
	ca := testcerts.NewCA(t, "one CA for everything")
	nodes, _ := tlsCluster(t, ca, 3)
	leader := waitLeading(t, nodes)
	var follower *Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	serve := func(cfg *tls.Config) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { // ends when the listener closes
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.(*tls.Conn).Handshake()
				c.Write([]byte("x"))
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close(); <-done })
		return ln.Addr().String()
	}
	dial := func(addr string, cfg *tls.Config) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the server's verdict on the client comes with the first read
		return err
	}
	leaderSide, _ := leader.ForwardTLS("p")
	_, followerSide := follower.ForwardTLS("p")
	at := serve(leaderSide)
	if err := dial(at, followerSide); err != nil {
		t.Fatalf("member to member: %v", err)
	}
	worker := &tls.Config{Certificates: []tls.Certificate{ca.Client(t, "worker").TLS}, InsecureSkipVerify: true, NextProtos: []string{"p"}}
	if err := dial(at, worker); err == nil {
		t.Error("a lock client's certificate opened the forward channel")
	}
	impostor := serve(&tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}})
	if err := dial(impostor, followerSide); err == nil {
		t.Error("the follower accepted a server certificate that names no member")
	}
	if id, err := leader.Member(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{ca.Node(t, "n2").TLS.Leaf}}); err != nil || id != "n2" {
		t.Errorf("Member(n2's certificate): %q, %v", id, err)
	}
	if _, err := leader.Member(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{ca.Node(t, "n9").TLS.Leaf}}); err == nil {
		t.Error("Member(n9's certificate): a member, want not")
	}
}

func TestNodeIdentity(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	for _, tt := range []struct {
		uris []string
		want string // "" for an error
	}{
		{[]string{"baton://node/n1"}, "n1"},
		{[]string{"spiffe://example.org/x", "baton://node/db-1.eu"}, "db-1.eu"},
		{[]string{"baton://node/n%2F1"}, "n/1"},
		{nil, ""},
		{[]string{"baton://node/"}, ""},
		{[]string{"baton://node/n1?x=1"}, ""},
		{[]string{"baton://node/n1#f"}, ""},
		{[]string{"baton://user@node/n1"}, ""},
		{[]string{"baton://node/n1", "baton://node/n2"}, ""},
		{[]string{"baton://nodes/n1"}, ""},
		{[]string{"https://node/n1"}, ""},
	} {
		leaf := ca.Issue(t, testcerts.Spec{CN: "x", URIs: tt.uris})
		got, err := NodeIdentity(leaf.TLS.Leaf)
		if (err == nil) != (tt.want != "") || got != tt.want {
			t.Errorf("URIs %q: got %q, %v; want %q", tt.uris, got, err, tt.want)
		}
	}
	for _, id := range []string{"n1", "db 1", "n/1", "ü"} {
		leaf := ca.Issue(t, testcerts.Spec{CN: "x", URIs: []string{NodeURI(id)}})
		if got, err := NodeIdentity(leaf.TLS.Leaf); got != id || err != nil {
			t.Errorf("NodeIdentity(NodeURI(%q) = %q): %q, %v", id, NodeURI(id), got, err)
		}
	}
}

// BenchmarkMemberCheck is what every read and write of a Raft connection
// over TLS adds: a look at the latest configuration (3 members).
func BenchmarkMemberCheck(b *testing.B) {
	rc := raft.DefaultConfig()
	rc.LocalID = "n1"
	rc.Logger = hclog.NewNullLogger()
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("n1")
	conf := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}, {ID: "n2", Address: "n2"}, {ID: "n3", Address: "n3"}}}
	if err := raft.BootstrapCluster(rc, store, store, snaps, trans, conf); err != nil {
		b.Fatal(err)
	}
	r, err := raft.NewRaft(rc, newFSM(), store, store, snaps, trans)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown().Error()
	m := raftMembers(r)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := stillMember(m, "n3"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestJoiningNodeAdmitsOnlyItsPeers: over TLS, a node waiting to be added
// admits only the current members named in its -peers, not any node
// certificate of the CA (a decommissioned node's, another cluster's):
// one could otherwise hand it a forged log at a huge term and, once it is
// added, take the cluster over. Without -peers it does not start.
func TestJoiningNodeAdmitsOnlyItsPeers(t *testing.T) {
	ca := testcerts.NewCA(t, "one CA for several clusters")
	_, peers := tlsCluster(t, ca, 3)
	addr4 := loopbackAddrs(t, 1)[0]
	cfg := testConfig("n4")
	cfg.RaftAddr, cfg.Join, cfg.DataDir = addr4, true, t.TempDir()
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Node(t, "n4").TLS}, RootCAs: ca.Pool()}
	if _, err := Open(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "-peers") {
		t.Fatalf("a joining node over TLS without -peers: %v, want refused, naming -peers", err)
	}
	openTLSNode(t, ca, ca.Node(t, "n4"), "n4", addr4, peers, true)
	var resp raft.AppendEntriesResponse
	err := rawRaft(t, ca.Node(t, "n9-decommissioned").TLS).AppendEntries("n4", raft.ServerAddress(addr4),
		&raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: 1000000}, &resp)
	if err == nil {
		t.Fatalf("a node certificate that is not among the joining node's peers was answered (term %d)", resp.Term)
	}
}

// TestRaftMembersByName: nodes that listen on an IP and advertise a DNS
// name (-raft-advertise) keep the name in the membership and in Raft's own
// leader address, form a cluster over mutual TLS (the peer is checked by
// the node id its certificate names against the member at the dialed
// name, never by host name), and a node certificate of another member
// answering at a member's name is refused. "localhost" is the one name
// every test machine resolves; the ports tell the members apart.
func TestRaftMembersByName(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	addrs := loopbackAddrs(t, 3)
	var peers []Peer
	for i, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: net.JoinHostPort("localhost", port)})
	}
	var nodes []*Node
	for i, p := range peers {
		cfg := testConfig(p.ID)
		cfg.RaftAddr, cfg.RaftAdvertise, cfg.Peers, cfg.DataDir = addrs[i], p.RaftAddr, peers, t.TempDir()
		cfg.Addr, cfg.OpsAddr = "127.0.0.1:1", "127.0.0.1:2"
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Node(t, p.ID).TLS}, RootCAs: ca.Pool()}
		n, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("open %s: %v", p.ID, err)
		}
		n.Start(&nullServer{})
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	leader := waitLeading(t, nodes)
	leaderName := string(leader.transport.LocalAddr())
	for _, n := range nodes {
		batontest.Eventually(t, settle, func() bool {
			addr, _ := n.r().LeaderWithID()
			return string(addr) == leaderName
		}, "a node does not know the leader by its name")
		ms, err := n.members()
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ms {
			if string(m.Address) != peers[i].RaftAddr {
				t.Errorf("member %s at %q, want the name %q", m.ID, m.Address, peers[i].RaftAddr)
			}
		}
	}
	if !strings.HasPrefix(leaderName, "localhost:") {
		t.Errorf("the leader's own address is %q, want its advertised name", leaderName)
	}

	// Another member's certificate at a member's name: refused.
	two := loopbackAddrs(t, 2)
	_, port2, _ := net.SplitHostPort(two[1])
	named := []Peer{{ID: "n1", RaftAddr: two[0]}, {ID: "n2", RaftAddr: net.JoinHostPort("localhost", port2)}}
	im := newImpostor(t, two[1], ca.Node(t, "n1"))
	openTLSNode(t, ca, ca.Node(t, "n1"), "n1", two[0], named, false)
	batontest.Eventually(t, settle, func() bool { h, _, _ := im.counts(); return h >= 2 }, "n1 never dialed n2's name")
	if h, refused, n := im.counts(); refused != h || n != 0 {
		t.Errorf("%d dials of n2's name: %d refused in the handshake, %d bytes sent to n1's certificate there; want all refused, none sent", h, refused, n)
	}
}
