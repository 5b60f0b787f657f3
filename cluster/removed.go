package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// What a node says, and does, when it is not (or no longer) in the
// cluster it knows: a node started with -join that nobody has added yet,
// and a member that was removed while it was down and came back with its
// old data. Raft alone says "no known peers, aborting election" for the
// first, and loops on elections for ever, each refused, for the second.

// ErrRemoved stops a node that was removed from the cluster while it was
// away: the members no longer admit it, and its old log cannot bring it
// back.
var ErrRemoved = errors.New("this node was removed from the cluster")

// membershipEvery is how often the leader loop looks at the two cases.
const membershipEvery = time.Second

// removedAfter is how long every other member must have refused this
// node, with none admitting it, before it counts as removed: several
// election timeouts, so that a restart of the others does not pass for a
// removal.
const removedAfter = 10 * time.Second

// joinReportEvery is how often a node waiting to be added says so.
const joinReportEvery = 30 * time.Second

// membershipWatch is the leader loop's state for the two cases.
type membershipWatch struct {
	joinSaid    time.Time // when "waiting to be added" was last logged
	refusedFrom time.Time // since when every other member has refused this node
	leaderless  time.Time // since when no leader has been known (plain TCP)
}

// lookAtMembership logs that a node waits to be added, and stops a node
// that every member refuses (ErrRemoved on Failed). On the leader loop.
func (n *Node) lookAtMembership(w *membershipWatch) {
	r := n.r()
	if r == nil || n.leading.Load() {
		return
	}
	servers := r.GetConfiguration().Configuration().Servers
	now := time.Now()
	if len(servers) == 0 {
		// A founder that starts late has no configuration either, for the
		// moment the leader takes to send it: only -join waits for a hand.
		if n.cfg.Join && now.Sub(w.joinSaid) >= joinReportEvery {
			w.joinSaid = now
			n.log.Warn(fmt.Sprintf("waiting to be added: run baton cluster add %s %s on a member", n.cfg.NodeID, n.cfg.RaftAddr),
				"node", n.cfg.NodeID, "raft_addr", n.cfg.RaftAddr)
		}
		return
	}
	st := n.stream()
	removed := false
	switch {
	case st != nil:
		removed = st.refusedByAll(n.cfg.NodeID, servers, now)
	default:
		removed = n.toldRemoved(r, servers, w, now)
	}
	if !removed {
		w.refusedFrom = time.Time{}
		return
	}
	if w.refusedFrom.IsZero() {
		w.refusedFrom = now
	}
	if now.Sub(w.refusedFrom) < removedAfter {
		return
	}
	if st == nil {
		err := fmt.Errorf("%w: the other members say it is not in their configuration; "+
			"wipe its data directory and start it with -join, then run baton cluster add %s %s on a member (a new -node-id is safer)",
			ErrRemoved, n.cfg.NodeID, n.cfg.RaftAddr)
		n.log.Error(err.Error(), "node", n.cfg.NodeID)
		select {
		case n.failed <- err:
		default:
		}
		w.refusedFrom = now
		return
	}
	if err := ownCertificateValid(n.cfg.TLS, now); err != nil {
		n.log.Error("every other member refuses this node's certificate, and it is not valid here either: renew it from the cluster's CA",
			"node", n.cfg.NodeID, "err", err)
		w.refusedFrom = now // said again after removedAfter
		return
	}
	err := fmt.Errorf("%w: every other member refuses its certificate (tls: bad certificate), which the cluster's CA accepts; "+
		"wipe its data directory and start it with -join, then run baton cluster add %s %s on a member (a new -node-id is safer)",
		ErrRemoved, n.cfg.NodeID, n.cfg.RaftAddr)
	n.log.Error(err.Error(), "node", n.cfg.NodeID)
	select {
	case n.failed <- err:
	default:
	}
	w.refusedFrom = now
}

// toldRemoved asks the other members, on plain TCP (where their Raft
// ports admit anyone and refuse only its votes), whether this node is in
// their configuration, once no leader has been known for a while: true
// when a majority of them answer, all say no, and they are of this node's
// cluster.
func (n *Node) toldRemoved(r *raft.Raft, servers []raft.Server, w *membershipWatch, now time.Time) bool {
	if _, id := r.LeaderWithID(); id != "" {
		w.leaderless = time.Time{}
		return false
	}
	if w.leaderless.IsZero() {
		w.leaderless = now
	}
	if now.Sub(w.leaderless) < removedAfter/2 {
		return false
	}
	lt, ok := n.transport.(*leaseTransport)
	if !ok {
		return false
	}
	rt, ok := lt.Transport.(*raftTransport)
	if !ok || rt.stream.tls != nil {
		return false
	}
	ours := n.fsm.get().ClusterID
	if ours == "" {
		ours = n.marker().ClusterID
	}
	others, saidNo := 0, 0
	for _, sv := range servers {
		if string(sv.ID) == n.cfg.NodeID {
			continue
		}
		others++
		reply, err := askHello(rt.stream.Dial, string(sv.Address), n.cfg.NodeID)
		switch {
		case err != nil, reply.Member == nil, reply.ClusterID != ours:
		case *reply.Member:
			return false // a member counts it in: not removed
		default:
			saidNo++
		}
	}
	return others > 0 && saidNo > others/2
}

// memberNow says whether node id is in this node's configuration, nil if
// this node has none (it waits to be added).
func (n *Node) memberNow(id string) *bool {
	r := n.r()
	if r == nil || len(r.GetConfiguration().Configuration().Servers) == 0 {
		return nil
	}
	m := n.isMember(raft.ServerID(id))
	return &m
}

// stream is this node's Raft stream over TLS, or nil (plain TCP, or the
// in-memory transport of the tests).
func (n *Node) stream() *stream {
	lt, ok := n.transport.(*leaseTransport)
	if !ok {
		return nil
	}
	rt, ok := lt.Transport.(*raftTransport)
	if !ok || rt.stream.tls == nil {
		return nil
	}
	return rt.stream
}

// ownCertificateValid checks that this node's certificate chains to the
// cluster's CA and is valid at now: if it does not, the others refuse it
// for that reason, not for a removal.
func ownCertificateValid(c *tls.Config, now time.Time) error {
	if c == nil || len(c.Certificates) == 0 || len(c.Certificates[0].Certificate) == 0 {
		return errors.New("no certificate")
	}
	chain := make([]*x509.Certificate, 0, len(c.Certificates[0].Certificate))
	for _, der := range c.Certificates[0].Certificate {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		chain = append(chain, cert)
	}
	inter := x509.NewCertPool()
	for _, cert := range chain[1:] {
		inter.AddCert(cert)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: c.RootCAs, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// certRefusals is what a stream saw of its dialed connections: when each peer
// last refused this node's certificate, and when any peer last answered.
type certRefusals struct {
	mu       sync.Mutex
	byPeer   map[string]time.Time
	answered time.Time
}

// noteOutbound records a read on a dialed connection to peer.
func (s *stream) noteOutbound(peer string, n int, err error) {
	s.certRefused.mu.Lock()
	defer s.certRefused.mu.Unlock()
	switch {
	case n > 0:
		s.certRefused.answered = time.Now()
	case err != nil && isCertificateRefusal(err):
		if s.certRefused.byPeer == nil {
			s.certRefused.byPeer = map[string]time.Time{}
		}
		s.certRefused.byPeer[peer] = time.Now()
	}
}

// refusedByAll reports whether every member but self refused this node's
// certificate within removedAfter and none has answered since.
func (s *stream) refusedByAll(self string, servers []raft.Server, now time.Time) bool {
	s.certRefused.mu.Lock()
	defer s.certRefused.mu.Unlock()
	others := 0
	for _, sv := range servers {
		if string(sv.ID) == self {
			continue
		}
		others++
		at, ok := s.certRefused.byPeer[string(sv.ID)]
		if !ok || now.Sub(at) > removedAfter || !s.certRefused.answered.Before(at) {
			return false
		}
	}
	return others > 0
}

// isCertificateRefusal reports whether err is the peer's TLS alert
// refusing this node's certificate.
func isCertificateRefusal(err error) bool {
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "remote error" {
		return false
	}
	// crypto/tls's alert type is unexported: its text is what there is.
	return oe.Err != nil && oe.Err.Error() == "tls: bad certificate"
}
