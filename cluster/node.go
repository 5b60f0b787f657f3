// Package cluster is Baton's replicated mode on hashicorp/raft: the small
// replicated state (epoch, lease bound, handoff bound), the leader loop that
// turns leadership into a serving lock server and back, and membership.
//
// The lock table, queues, heartbeats and per-grant tokens are not
// replicated: they live in the leader's memory (package server), which
// sees this package only through server.Config's NextToken, NoteLease and
// LeaderHint and its BeginTerm/EndTerm calls. A grant, a handover or a
// heartbeat never waits for Raft; only an ACQUIRE whose lease is longer
// than the committed bound does (once per longer lease).
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/batonlock/baton/server"
)

// Server is what the leader loop drives (*server.Server implements it).
type Server interface {
	BeginTerm(noGrantBefore time.Time)
	EndTerm(reason server.EndReason, msg string) (holders int, allClosed <-chan struct{})
	MaxLease() time.Duration
	GraceRemaining() time.Duration
}

var _ Server = (*server.Server)(nil)

// applyTimeout bounds one Raft write (the epoch, a bound, the handoff).
const applyTimeout = 5 * time.Second

// Node is one member of a cluster. Make it with Open, give it its server
// with Start, and stop it with Close (or Handover, then Close).
type Node struct {
	cfg Config
	log *slog.Logger

	raft      *raft.Raft
	fsm       *fsm
	transport raft.Transport
	boltStore *raftboltdb.BoltStore
	tok       tokens

	srv Server
	// leading is true between a committed epoch (BeginTerm) and the loss
	// of leadership (EndTerm).
	leading       atomic.Bool
	leaderChanges atomic.Uint64
	// raiseMu serialises bound changes, so that concurrent ACQUIREs with
	// the same longer lease make one Raft write.
	raiseMu sync.Mutex
	// noted is the longest lease NoteLease let through since the last
	// look at lowering the bound, in nanoseconds: a session between
	// NoteLease and the table is not yet in MaxLease.
	noted atomic.Int64
	// lowerTo is the bound the previous lowering look would have allowed;
	// the bound is lowered only to the larger of two looks in a row.
	lowerTo time.Duration

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	started  bool
}

// Open starts this node's Raft (it may take part in elections at once) on
// the state under cfg.DataDir. A founding member whose data directory has
// no Raft state bootstraps the cluster with cfg.Peers; every founder does
// so with the same list, which Raft allows. A node with Join waits to be
// added. A node with state ignores Peers: its membership is in its log.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	out := cfg.RaftLog
	if out == nil {
		out = os.Stderr
	}
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: out, JSONFormat: cfg.RaftLogJSON})
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// A timeout, because bbolt's file lock otherwise waits for ever when
	// another process has the same data directory open.
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft log in %s: %w", dir, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, rc.Logger)
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("cluster: snapshot store in %s: %w", dir, err)
	}
	trans, err := newTransport(cfg, rc.Logger)
	if err != nil {
		bolt.Close()
		return nil, err
	}
	n, err := openWith(cfg, log, rc, bolt, bolt, snaps, trans)
	if err != nil {
		trans.(interface{ Close() error }).Close()
		bolt.Close()
		return nil, err
	}
	n.boltStore = bolt
	return n, nil
}

// openWith is Open over given stores and transport (the tests use Raft's
// in-memory ones).
func openWith(cfg Config, log *slog.Logger, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) (*Node, error) {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if !has && !cfg.Join {
		var conf raft.Configuration
		for _, p := range cfg.Peers {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, conf); err != nil {
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}
	f := newFSM()
	r, err := raft.NewRaft(rc, f, logs, stable, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	// Over TLS the transport admits only the members of r's configuration.
	if t, ok := trans.(*raftTransport); ok {
		t.follow(r)
	}
	return &Node{
		cfg: cfg, log: log, raft: r, fsm: f, transport: trans,
		stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Start gives the node its lock server and starts the leader loop, which
// runs until Close.
func (n *Node) Start(srv Server) {
	n.srv = srv
	n.started = true
	go n.run()
}

// NextToken is server.Config.NextToken.
func (n *Node) NextToken() uint64 { return n.tok.next() }

// LeaderHint is server.Config.LeaderHint: the leader's advertised client
// address, "" while none is known (or while this node is the one taking
// over, so that no client is sent back to it).
func (n *Node) LeaderHint() string {
	_, id := n.raft.LeaderWithID()
	if id == "" || string(id) == n.cfg.NodeID {
		return ""
	}
	return n.fsm.get().Nodes[string(id)].Addr
}

// NoteLease is server.Config.NoteLease: a lease longer than the committed
// bound is committed through Raft before its session is queued, so that
// every later leader's grace covers it. Shorter ones cost an atomic load.
func (n *Node) NoteLease(lease time.Duration) error {
	for { // keep the longest lease seen, for lowerBound
		old := n.noted.Load()
		if int64(lease) <= old || n.noted.CompareAndSwap(old, int64(lease)) {
			break
		}
	}
	if lease <= n.bound() {
		if !n.leading.Load() {
			return server.ErrNotLeader
		}
		return nil
	}
	n.raiseMu.Lock()
	defer n.raiseMu.Unlock()
	if lease <= n.bound() {
		return nil
	}
	if !n.leading.Load() {
		return server.ErrNotLeader
	}
	return n.apply(command{Op: opBound, Bound: lease})
}

func (n *Node) bound() time.Duration {
	n.fsm.mu.Lock()
	defer n.fsm.mu.Unlock()
	return n.fsm.st.LeaseBound
}

// apply writes c through Raft and waits for it to be applied here.
func (n *Node) apply(c command) error {
	_, err := n.applyResult(c)
	return err
}

func (n *Node) applyResult(c command) (any, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	f := n.raft.Apply(b, applyTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return nil, server.ErrNotLeader
		}
		return nil, fmt.Errorf("cluster: raft apply %s: %w", c.Op, err)
	}
	if err, ok := f.Response().(error); ok {
		return nil, err
	}
	return f.Response(), nil
}

// run is the leader loop: it follows Raft's leadership signal. LeaderCh
// keeps only the latest value, so a true while already leading means that
// leadership was lost and won again in between: the old term ends first.
func (n *Node) run() {
	defer close(n.done)
	lower := time.NewTicker(n.cfg.BoundLowerEvery)
	defer lower.Stop()
	for {
		select {
		case <-n.stop:
			return
		case isLeader := <-n.raft.LeaderCh():
			if n.leading.Load() {
				n.revoke()
			}
			if isLeader {
				n.establish()
			}
		case <-lower.C:
			if n.leading.Load() {
				n.lowerBound()
			}
		}
	}
}

// establish makes this new leader serve: a Barrier so that its state
// machine has every committed entry, then the next epoch, then a fresh
// lock table that grants nothing for the failover grace.
func (n *Node) establish() {
	for {
		res, err := n.commitEpoch()
		if err == nil {
			grace := graceFor(res, n.cfg.LeaderLeaseTimeout)
			if graceDisabled() {
				n.log.Warn("failover grace switched off by BATON_TEST_DISABLE_GRACE (faultinject test build): grants may overlap the old leader's")
				grace = 0
			}
			n.tok.setEpoch(res.Epoch)
			// leading first: a session admitted by BeginTerm must find
			// NoteLease willing.
			n.leading.Store(true)
			n.srv.BeginTerm(time.Now().Add(grace))
			n.leaderChanges.Add(1)
			n.log.Info("leadership gained", "node", n.cfg.NodeID, "term", n.raft.CurrentTerm(),
				"epoch", res.Epoch, "grace", grace.String(), "lease_bound", res.LeaseBound.String(), "planned_handoff", res.HasHandoff)
			return
		}
		if n.raft.State() != raft.Leader {
			n.log.Warn("leadership lost while taking over", "node", n.cfg.NodeID, "err", err)
			return
		}
		n.log.Error("cannot commit a new epoch; retrying", "node", n.cfg.NodeID, "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) commitEpoch() (epochResult, error) {
	if err := n.raft.Barrier(applyTimeout).Error(); err != nil {
		return epochResult{}, fmt.Errorf("barrier: %w", err)
	}
	r, err := n.applyResult(command{Op: opEpoch, Node: n.cfg.NodeID, Addr: n.cfg.Addr, OpsAddr: n.cfg.OpsAddr, LeaderLease: n.cfg.LeaderLeaseTimeout})
	if err != nil {
		return epochResult{}, err
	}
	return r.(epochResult), nil
}

// graceFor is the failover grace of a new leader: after a planned handoff
// the bound its predecessor committed (0 when every holder had closed);
// otherwise the lease bound B plus twice the leader lease timeout, the
// time a leader cut off from the quorum may keep confirming heartbeats
// before hashicorp/raft makes it step down (the lease check runs every
// LeaderLeaseTimeout, so up to two of them pass). The timeout is the
// longest of this node's and every earlier leader's: the old leader steps
// down on its own timer, which may be longer than ours (the cluster fault
// harness showed two holders when it was).
func graceFor(r epochResult, leaderLease time.Duration) time.Duration {
	if r.HasHandoff {
		return r.Handoff
	}
	return r.LeaseBound + 2*max(leaderLease, r.MaxLeaderLease)
}

// revoke ends the term: every session ends with NOT_LEADER at once.
func (n *Node) revoke() {
	n.leading.Store(false)
	n.srv.EndTerm(server.ReasonNotLeader, n.LeaderHint())
	n.log.Info("leadership lost", "node", n.cfg.NodeID, "term", n.raft.CurrentTerm(), "epoch", n.fsm.get().Epoch)
}

// lowerBound commits a lower lease bound once two looks in a row found no
// session (in the table, or let through NoteLease since the look before)
// that needs the current one.
func (n *Node) lowerBound() {
	n.raiseMu.Lock()
	defer n.raiseMu.Unlock()
	need := max(n.srv.MaxLease(), time.Duration(n.noted.Swap(0)))
	prev := n.lowerTo
	n.lowerTo = need
	target := max(need, prev)
	if target >= n.bound() {
		return
	}
	if err := n.apply(command{Op: opBound, Bound: target}); err != nil {
		n.log.Warn("cannot lower the lease bound", "to", target.String(), "err", err)
	}
}

// Handover is the planned stop of a leader (SIGTERM): every session gets
// ERROR SHUTDOWN, the holders' closes are awaited for HandoverDrain, the
// handoff bound is committed (0 if every holder closed, else the lease
// bound) and leadership is transferred. On a follower it does nothing.
func (n *Node) Handover() error {
	if !n.leading.Load() {
		return nil
	}
	n.raiseMu.Lock()
	n.leading.Store(false)
	holders, closed := n.srv.EndTerm(server.ReasonShutdown, "leader handing over")
	n.raiseMu.Unlock()
	bound := time.Duration(0)
	select {
	case <-closed:
	case <-time.After(n.cfg.HandoverDrain):
		bound = n.bound()
	}
	if err := n.apply(command{Op: opHandoff, Bound: bound}); err != nil {
		return fmt.Errorf("commit handoff bound: %w", err)
	}
	start := time.Now()
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	n.log.Info("leadership handed over", "node", n.cfg.NodeID, "term", n.raft.CurrentTerm(), "epoch", n.fsm.get().Epoch, "holders", holders,
		"handoff_bound", bound.String(), "transfer", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// Close stops the leader loop and Raft (no membership change: the node
// stays a member and can come back with its data directory).
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	if n.started {
		<-n.done
	}
	err := n.raft.Shutdown().Error()
	if n.leading.Swap(false) {
		n.srv.EndTerm(server.ReasonShutdown, "server shutting down")
	}
	if c, ok := n.transport.(interface{ Close() error }); ok {
		c.Close()
	}
	if n.boltStore != nil {
		n.boltStore.Close()
	}
	return err
}

// Membership errors, shared with the ops API through package server.
var (
	ErrNotMember    = server.ErrNotMember
	ErrMemberExists = server.ErrMemberExists
)

// AddMember adds a voter (on the leader only: server.ErrNotLeader).
func (n *Node) AddMember(id, raftAddr string) error {
	if id == "" {
		return fmt.Errorf("member id is empty")
	}
	if _, port, err := net.SplitHostPort(raftAddr); err != nil || port == "" || port == "0" {
		return fmt.Errorf("raft address %q is not host:port", raftAddr)
	}
	conf, err := n.members()
	if err != nil {
		return err
	}
	for _, s := range conf {
		if string(s.ID) == id || string(s.Address) == raftAddr {
			return fmt.Errorf("%w: %s at %s", ErrMemberExists, s.ID, s.Address)
		}
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, applyTimeout).Error(); err != nil {
		return n.mapErr("add member", err)
	}
	n.log.Info("member added", "id", id, "raft_addr", raftAddr)
	return nil
}

// RemoveMember removes a member (on the leader only: server.ErrNotLeader).
func (n *Node) RemoveMember(id string) error {
	conf, err := n.members()
	if err != nil {
		return err
	}
	found := false
	for _, s := range conf {
		found = found || string(s.ID) == id
	}
	if !found {
		return fmt.Errorf("%w: %q", ErrNotMember, id)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, applyTimeout).Error(); err != nil {
		return n.mapErr("remove member", err)
	}
	n.log.Info("member removed", "id", id)
	return nil
}

func (n *Node) mapErr(what string, err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return server.ErrNotLeader
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (n *Node) members() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read membership: %w", err)
	}
	return f.Configuration().Servers, nil
}

// Leading reports whether this node leads with its epoch committed.
func (n *Node) Leading() bool { return n.leading.Load() }

// LeaderOpsAddr is the leader's advertised ops address ("" if unknown) and
// whether this node is the leader.
func (n *Node) LeaderOpsAddr() (string, bool) {
	if n.leading.Load() {
		return n.cfg.OpsAddr, true
	}
	_, id := n.raft.LeaderWithID()
	if id == "" || string(id) == n.cfg.NodeID {
		return "", false
	}
	return n.fsm.get().Nodes[string(id)].OpsAddr, false
}

// View is GET /v1/cluster.
func (n *Node) View() server.ClusterView {
	st := n.fsm.get()
	v := server.ClusterView{
		NodeID:     n.cfg.NodeID,
		Term:       n.raft.CurrentTerm(),
		Epoch:      st.Epoch,
		LeaseBound: st.LeaseBound,
	}
	switch n.raft.State() {
	case raft.Leader:
		v.Role = "leader"
	case raft.Candidate:
		v.Role = "candidate"
	default:
		v.Role = "follower"
	}
	if _, id := n.raft.LeaderWithID(); id != "" {
		a := st.Nodes[string(id)]
		v.Leader = &server.ClusterNode{ID: string(id), Addr: a.Addr, OpsAddr: a.OpsAddr}
	}
	if n.leading.Load() {
		v.GraceRemaining = n.srv.GraceRemaining()
	}
	if conf, err := n.members(); err == nil {
		for _, s := range conf {
			v.Members = append(v.Members, server.ClusterMember{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
		}
	}
	return v
}
