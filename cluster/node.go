// Package cluster is Baton's replicated mode on hashicorp/raft: the small
// replicated state (epoch, lease bound, the grace each epoch inherits, the
// handoff), the leader loop that turns leadership into a serving lock
// server and back, the leader's own send-anchored lease, and membership.
//
// The lock table, queues, heartbeats and per-grant tokens are not
// replicated: they live in the leader's memory (package server), which
// sees this package only through what Node.Hooks sets in its Config (the
// node as its server.Replica: the lease bound, may I grant or confirm
// now?; tokens) and its BeginTerm/EndTerm calls. A grant, a handover or a heartbeat never waits
// for Raft; only an ACQUIRE whose lease is longer than the committed bound
// does (once per longer lease).
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/batonlock/baton/clients/go/clock"
	"github.com/batonlock/baton/server"
)

// Server is what the leader loop drives (*server.Server implements it).
type Server interface {
	BeginTerm(grace time.Duration, carried server.Carried)
	EndTerm(reason server.EndReason, msg string) (holders int, allClosed <-chan struct{})
	// HandOver begins a planned handover to the node at the client
	// address successor (protocol version 3: the list).
	HandOver(successor string) *server.Handover
	MaxLease() time.Duration
	GraceRemaining() time.Duration
	// Served reports whether the term has served its grace whole (the
	// grace over, no claim of a planned list pending).
	Served() bool
	Serving() bool
}

var _ Server = (*server.Server)(nil)

// applyTimeout bounds one Raft write (the epoch, a bound, the handoff).
const applyTimeout = 5 * time.Second

// Node is one member of a cluster. Make it with Open, give it its server
// with Start, and stop it with Close (or Handover, then Close).
type Node struct {
	cfg Config
	log *slog.Logger

	rp        atomic.Pointer[raft.Raft] // see r
	raftUp    chan struct{}             // closed once rp is set
	starting  chan struct{}             // closed when the asking goroutine ends (nil: none)
	failed    chan error
	fsm       *fsm
	transport raft.Transport
	boltStore *raftboltdb.BoltStore
	tok       tokens
	lease     *leaderLease
	health    healthWatch
	// now reads the clock of the leader lease, the grace and the handoff
	// (Config.Now), and the server's (see Hooks).
	now func() time.Time

	srv Server
	// leading is true between a committed epoch (BeginTerm) and the end of
	// the term (EndTerm, or the server failing closed).
	leading       atomic.Bool
	leaderChanges atomic.Uint64
	leaseLapses   atomic.Uint64 // terms the server ended on a lapsed leader lease
	// epoch is the epoch this node serves while leading, and epochIndex
	// the index of its entry in the log.
	epoch, epochIndex atomic.Uint64
	// markerDir is where the marker lives ("" over the in-memory
	// transport: nothing kept), and markerV the marker as last read or
	// written.
	markerDir string
	markerMu  sync.Mutex
	markerV   clusterMarker
	// served is the last epoch whose grace this node recorded as served
	// whole (opServed). Owned by the leader loop.
	served uint64
	// raiseMu serialises bound changes, so that concurrent ACQUIREs with
	// the same longer lease make one Raft write, and no lease is let
	// through while a lowering is being committed.
	raiseMu sync.Mutex
	// fastBound is the longest lease NoteLease lets through without Raft.
	// It is the committed bound, except while a lowering is on its way:
	// then it is already the lower target, so that no session is admitted
	// on a bound that the pending commit may lower (see lowerBound).
	fastBound atomic.Int64
	// noted is the longest lease NoteLease let through since the last
	// look at lowering the bound, in nanoseconds: a session between
	// NoteLease and the table is not yet in MaxLease.
	noted atomic.Int64
	// lowerTo is the bound the previous lowering look would have allowed;
	// the bound is lowered only to the larger of two looks in a row.
	// Owned by the leader loop.
	lowerTo time.Duration

	// beforeLowerCommit, if set (by tests), runs once in lowerBound just
	// before a lower bound is committed.
	beforeLowerCommit atomic.Pointer[func()]

	// Protocol version 3 (resume.go). giving: this leader gives and checks
	// credentials (every voter speaks version 3, the key is recorded).
	// askVersion, if set (the tests, over the in-memory transport), stands
	// in for the hello that asks a member its version. lostKeySaid: the
	// lost key was logged (leader loop). servedNow: the server says its
	// term served its grace.
	giving      atomic.Bool
	askVersion  func(raft.Server) (uint8, nodeAddrs, error)
	lostKeySaid atomic.Bool
	servedNow   chan struct{}
	// versionsNow asks watchVersions to look at once (a new term).
	versionsNow chan struct{}
	// commitTimeout is Raft's CommitTimeout: how soon a follower learns
	// that an entry committed.
	commitTimeout time.Duration

	// termLost is signalled by the server when it failed closed (its
	// leader lease had run out); the leader loop then takes a new epoch.
	termLost chan struct{}
	// handovers carries Handover's request to the leader loop, so that a
	// handover and an establishment never run at once.
	handovers chan chan error

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
//
// A founding member with no Raft state first asks the other founders
// whether the cluster exists (bootstrap.go), for as long as it takes or
// until ctx ends: it bootstraps a new cluster, starts without
// bootstrapping (the cluster exists and it never held the log), or refuses
// with ErrLostData (it held the log and lost it). A node with Join and no
// Raft state likewise asks the members whether it held the log
// (rejoin.go), and starts Raft once the leader says it did not. A data
// directory that holds less than this node acknowledged is refused at
// once: ErrRolledBack, or ErrLostData with no Raft state (logmark.go).
func Open(ctx context.Context, cfg Config) (*Node, error) {
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
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: newRaftLog(log), JSONFormat: true})
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// A timeout, because bbolt's file lock otherwise waits for ever when
	// another process has the same data directory open.
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft log in %s: %w", dir, err)
	}
	snaps, err := newSecureSnapshots(dir, 2, func(dir string, retain int) (raft.SnapshotStore, error) {
		return raft.NewFileSnapshotStoreWithLogger(dir, retain, rc.Logger)
	})
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("cluster: snapshot store in %s: %w", dir, err)
	}
	// Before anything listens: a data directory that holds less than this
	// node acknowledged (logmark.go).
	mark, err := checkDataDir(cfg, dir, bolt, bolt, snaps)
	if err != nil {
		bolt.Close()
		return nil, err
	}
	stores := newMarkedStores(dir, bolt, bolt, mark)
	trans, err := newTransport(cfg, rc.Logger)
	if err != nil {
		bolt.Close()
		return nil, err
	}
	n, err := openWith(ctx, cfg, log, rc, stores, stores, snaps, trans)
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
// Over the in-memory transport nobody is asked whether to bootstrap.
func openWith(ctx context.Context, cfg Config, log *slog.Logger, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) (*Node, error) {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	// What every failover grace budgets for an old leader (graceOf), so
	// the grace still covers every confirmation it makes; twice the leader
	// lease timeout, so that a loaded machine's stall shorter than that
	// does not end a term.
	now := cfg.Now
	if now == nil {
		now = clock.Now
	}
	lease := newLeaderLease(raft.ServerID(cfg.NodeID), leaderLeaseSpan(cfg.LeaderLeaseTimeout), now)
	n := &Node{
		commitTimeout: rc.CommitTimeout,
		cfg:           cfg, log: log, fsm: newFSM(), transport: &leaseTransport{Transport: trans, lease: lease}, lease: lease, now: now,
		termLost:    make(chan struct{}, 1),
		handovers:   make(chan chan error),
		servedNow:   make(chan struct{}, 1),
		versionsNow: make(chan struct{}, 1),
		raftUp:      make(chan struct{}),
		failed:      make(chan error, 1),
		stop:        make(chan struct{}), done: make(chan struct{}),
	}
	rt, real := trans.(*raftTransport)
	if real {
		n.markerDir = filepath.Join(cfg.DataDir, "raft")
		m, err := readMarker(n.markerDir)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		n.markerV = m
		n.fsm.record = n.record
	}
	ask := real && !has
	if ask && cfg.Join && wipedJoinStarts() {
		log.Warn("a joining node with no state starts without asking whether it held the log (faultinject build): a member that lost its data may vote")
		ask = false
	}
	if !ask {
		if real && !has {
			rt.beforeRaft(nil) // no configuration yet: any node certificate, as a joining node admits
		}
		if err := n.startRaft(rc, logs, stable, snaps, !has && !cfg.Join); err != nil {
			return nil, err
		}
		return n, nil
	}
	// No state: ask the others first, without holding up the node's start
	// (its ops endpoints say what it waits for). A founder asks the other
	// founders whether to bootstrap (bootstrap.go); a joining node, the
	// current members whether it held the log (rejoin.go).
	rt.beforeRaft(cfg.Peers)
	n.starting = make(chan struct{})
	go func() {
		defer close(n.starting)
		stop := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-n.stop:
			case <-n.starting:
				return
			}
			close(stop)
		}()
		var err error
		if cfg.Join {
			if err = decideJoin(cfg, log, rt.stream.Dial, rt.Consumer(), stop); err == nil {
				err = n.startRaft(rc, logs, stable, snaps, false)
			}
		} else {
			var d bootstrapDecision
			if d, err = decideBootstrap(cfg, log, rt.stream.Dial, stop); err == nil {
				err = n.startRaft(rc, logs, stable, snaps, d == bootstrapNew)
			}
		}
		if err != nil {
			n.failed <- err
		}
	}()
	return n, nil
}

// startRaft starts Raft, bootstrapping the founders' configuration first
// if bootstrap.
func (n *Node) startRaft(rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, bootstrap bool) error {
	if bootstrap {
		var conf raft.Configuration
		for _, p := range n.cfg.Peers {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(memberAddr(p.RaftAddr))})
		}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, n.transport, conf); err != nil {
			return fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, stable, snaps, n.transport)
	if err != nil {
		return fmt.Errorf("cluster: start raft: %w", err)
	}
	n.lease.setConfig(func() raft.Configuration { return r.GetConfiguration().Configuration() })
	// Over TLS the transport admits only the members of r's configuration.
	if t, ok := n.transport.(*leaseTransport).Transport.(*raftTransport); ok {
		t.follow(r, n.cfg.Peers)
		t.answerHellos(n.helloFor)
	}
	n.rp.Store(r)
	close(n.raftUp)
	return nil
}

// marker is the marker as last read or written.
func (n *Node) marker() clusterMarker {
	n.markerMu.Lock()
	defer n.markerMu.Unlock()
	return clusterMarker{ClusterID: n.markerV.ClusterID, Joined: slices.Clone(n.markerV.Joined)}
}

// record keeps the cluster id and the members that hold the log on disk
// (fsm.record), merged with what the marker already says: a replay from
// the start of the log must not make it forget.
func (n *Node) record(clusterID string, joined []string) {
	n.markerMu.Lock()
	defer n.markerMu.Unlock()
	m := n.markerV
	if m.ClusterID == "" {
		m.ClusterID = clusterID
	}
	for _, j := range joined {
		if !slices.Contains(m.Joined, j) {
			m.Joined = append(m.Joined, j)
		}
	}
	slices.Sort(m.Joined)
	if m.ClusterID == n.markerV.ClusterID && slices.Equal(m.Joined, n.markerV.Joined) {
		return
	}
	if err := writeMarker(n.markerDir, m); err != nil {
		n.log.Error("cannot keep the cluster's record on disk: a founder that loses its data may not be told it held the log", "err", err)
		return
	}
	n.markerV = m
}

// r is this node's Raft, nil while a founder with no state still asks the
// others whether to bootstrap.
func (n *Node) r() *raft.Raft { return n.rp.Load() }

// Failed receives the error that stopped this node after
// Open returned: a founder that must not bootstrap (ErrLostData), or one
// whose Raft could not start. The node serves nothing after it.
func (n *Node) Failed() <-chan error { return n.failed }

// Start gives the node its lock server and starts the leader loop, which
// runs until Close.
func (n *Node) Start(srv Server) {
	n.srv = srv
	n.started = true
	go n.run()
}

// Node is the Replica of its server: the lease bound, the leader lease, the
// leader's address.
var _ server.Replica = (*Node)(nil)

// Hooks sets what a replicated server needs of this node in cfg: the node
// itself as its Replica, tokens and tickets, the resume credentials, and
// the clock, so that the instants the server asks MayServe about are on
// the leader lease's.
func (n *Node) Hooks(cfg *server.Config) {
	cfg.Replica = n
	cfg.Now = n.now
	cfg.NextToken = n.NextToken
	cfg.Resume = resumeSource{n}
	cfg.NextTicket = n.tok.nextTicket
}

// NextToken is server.Config.NextToken.
func (n *Node) NextToken() uint64 { return n.tok.next() }

// LeaderHint is server.Replica.LeaderHint: the leader's advertised client
// address, "" while none is known (or while this node is the one taking
// over, so that no client is sent back to it). Only a current member's
// address is ever handed out.
func (n *Node) LeaderHint() string {
	a, ok := n.leaderAddrs()
	if !ok {
		return ""
	}
	return a.Addr
}

// leaderAddrs is the advertised addresses of the leader Raft names, if it
// is another node and a current member of the configuration: what the
// replicated state says of a node that is not a member (a removed one) is
// never trusted.
func (n *Node) leaderAddrs() (nodeAddrs, bool) {
	r := n.r()
	if r == nil {
		return nodeAddrs{}, false
	}
	_, id := r.LeaderWithID()
	if id == "" || string(id) == n.cfg.NodeID || !n.isMember(id) {
		return nodeAddrs{}, false
	}
	a, ok := n.fsm.get().Nodes[string(id)]
	return a, ok && a.Addr != ""
}

func (n *Node) isMember(id raft.ServerID) bool {
	r := n.r()
	if r == nil {
		return false
	}
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.ID == id {
			return true
		}
	}
	return false
}

// MayServe is server.Replica.MayServe: whether this leader's own lease,
// anchored at the send times a quorum acknowledged, still holds at now.
func (n *Node) MayServe(now time.Time) bool { return n.lease.valid(now) }

// TermLost is server.Replica.TermLost: the server failed closed and ended
// every session; the leader loop takes a new epoch once the lease holds
// again, if this node still leads.
func (n *Node) TermLost() {
	n.leaseLapses.Add(1)
	n.leading.Store(false)
	select {
	case n.termLost <- struct{}{}:
	default:
	}
}

// NoteLease is server.Replica.NoteLease: a lease longer than the committed
// bound is committed through Raft before its session is queued, so that
// every later leader's grace covers it. Shorter ones cost two atomics.
func (n *Node) NoteLease(lease time.Duration) error {
	_, err := n.noteLease(lease, true)
	return err
}

// TryNoteLease is server.Replica.TryNoteLease: NoteLease for a caller that
// must not wait (the idle poller's shard); false when it would need Raft.
func (n *Node) TryNoteLease(lease time.Duration) (bool, error) {
	return n.noteLease(lease, false)
}

func (n *Node) noteLease(lease time.Duration, mayWait bool) (bool, error) {
	// Noted before the bound is read: a lowering that sets fastBound after
	// this read finds the lease in noted (see lowerBound).
	for {
		old := n.noted.Load()
		if int64(lease) <= old || n.noted.CompareAndSwap(old, int64(lease)) {
			break
		}
	}
	if int64(lease) <= n.fastBound.Load() {
		if !n.leading.Load() {
			return true, server.ErrNotLeader
		}
		return true, nil
	}
	if !mayWait {
		return false, nil
	}
	n.raiseMu.Lock()
	defer n.raiseMu.Unlock()
	if !n.leading.Load() {
		return true, server.ErrNotLeader
	}
	if int64(lease) <= n.fastBound.Load() {
		return true, nil
	}
	if err := n.apply(command{Op: opBound, Epoch: n.epoch.Load(), Bound: lease}); err != nil {
		return true, err
	}
	n.fastBound.Store(int64(lease))
	return true, nil
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
	r, _, err := n.applyIndexed(c)
	return r, err
}

// applyIndexed is applyResult that also returns the entry's log index.
func (n *Node) applyIndexed(c command) (any, uint64, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, 0, err
	}
	r := n.r()
	if r == nil {
		return nil, 0, server.ErrNotLeader
	}
	f := r.Apply(b, applyTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return nil, 0, server.ErrNotLeader
		}
		return nil, 0, fmt.Errorf("cluster: raft apply %s: %w", c.Op, err)
	}
	if err, ok := f.Response().(error); ok {
		if errors.Is(err, errStaleEpoch) {
			return nil, 0, server.ErrNotLeader
		}
		return nil, 0, err
	}
	return f.Response(), f.Index(), nil
}

// run is the leader loop: it follows Raft's leadership signal, and it alone
// takes and ends terms. LeaderCh keeps only the latest value, so a true
// while already leading means that leadership was lost and won again in
// between: the old term ends first. A handover runs here too, so that no
// new term can begin while one is handed over.
func (n *Node) run() {
	defer close(n.done)
	for waiting := true; waiting; {
		select {
		case <-n.stop:
			return
		case <-n.raftUp:
			waiting = false
		case done := <-n.handovers:
			done <- nil // nothing served yet
		}
	}
	r := n.r()
	// The members' versions are asked on a goroutine of their own: a
	// hello to a member that does not answer takes seconds, which the
	// leader loop must not wait.
	versions := make(chan struct{})
	versionsDone := make(chan struct{})
	go n.watchVersions(versions, versionsDone)
	defer func() {
		close(versions)
		<-versionsDone
	}()
	lower := time.NewTicker(n.cfg.BoundLowerEvery)
	defer lower.Stop()
	joined := time.NewTicker(joinedEvery)
	defer joined.Stop()
	membership := time.NewTicker(membershipEvery)
	defer membership.Stop()
	var mw membershipWatch
	for {
		select {
		case <-n.stop:
			return
		case isLeader := <-r.LeaderCh():
			if n.leading.Load() {
				n.revoke()
			}
			if isLeader {
				n.establish()
			}
		case <-n.termLost:
			// The server ended every session; the term is over. Take a
			// new epoch if Raft still says this node leads. (A signal
			// older than the term the server now serves is stale.)
			if n.srv.Serving() {
				continue
			}
			n.leading.Store(false)
			n.log.Warn("leader lease ran out: every session ended with NOT_LEADER", "node", n.cfg.NodeID, "epoch", n.epoch.Load())
			if r.State() == raft.Leader {
				n.establish()
			}
		case done := <-n.handovers:
			done <- n.handover()
		case <-n.servedNow:
			if n.leading.Load() {
				n.recordServed()
			}
		case <-lower.C:
			if n.leading.Load() {
				n.lowerBound()
			}
		case <-membership.C:
			n.lookAtMembership(&mw) // removed.go
		case <-joined.C:
			if n.leading.Load() {
				n.recordServed()
				n.recordJoined()
				n.lookAtHealth()
			}
		}
	}
}

// establish makes this new leader serve: a Barrier so that its state
// machine has every committed entry, then the next epoch, then a fresh
// lock table that grants nothing for the epoch's failover grace.
func (n *Node) establish() {
	for {
		res, err := n.commitEpoch()
		if err == nil {
			n.begin(res)
			return
		}
		if errors.Is(err, errEpochsExhausted) {
			n.log.Error("cannot lead", "node", n.cfg.NodeID, "err", err)
		} else if n.r().State() != raft.Leader {
			n.log.Warn("leadership lost while taking over", "node", n.cfg.NodeID, "err", err)
			return
		} else {
			n.log.Error("cannot commit a new epoch; retrying", "node", n.cfg.NodeID, "err", err)
		}
		select {
		case <-n.stop:
			return
		case done := <-n.handovers:
			done <- nil // nothing served yet: nothing to hand over
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// begin starts serving the committed epoch res.
func (n *Node) begin(res epochResult) {
	grace := res.Grace
	if graceDisabled() {
		n.log.Warn("failover grace switched off (faultinject build): grants may overlap the old leader's")
		grace = 0
	}
	if res.Epoch >= epochWarnAt {
		n.log.Error("the epoch space is running out: recreate the cluster before it does", "epoch", res.Epoch, "epochs_left", maxEpoch-epochReserve-res.Epoch)
	}
	// The leader lease must hold before the first grant or confirmation:
	// the epoch's commit needed a quorum, and heartbeats follow within a
	// few milliseconds. (If it does not, the first grant or confirmation
	// fails closed, and the next epoch waits the crash grace.)
	deadline := n.now().Add(2 * n.cfg.HeartbeatTimeout)
	for !n.lease.valid(n.now()) && n.now().Before(deadline) {
		time.Sleep(n.cfg.HeartbeatTimeout / 20)
	}
	n.tok.setEpoch(res.Epoch)
	n.epoch.Store(res.Epoch)
	// The bound as committed: nothing to lower in this epoch yet.
	n.fastBound.Store(int64(res.LeaseBound))
	n.noted.Store(0)
	n.lowerTo = res.LeaseBound
	// A lapse signal of an earlier term must not end this one.
	select {
	case <-n.termLost:
	default:
	}
	// leading first: a session admitted by BeginTerm must find NoteLease
	// willing.
	n.leading.Store(true)
	// Credentials from the first answer, when the state says every voter
	// speaks version 3 and has the key: a resume held until this term
	// began must not be refused for want of them (watchVersions records
	// the voters not yet known and makes the key).
	n.giving.Store(n.mayGive())
	n.lostKeySaid.Store(false)
	n.srv.BeginTerm(grace, n.carried(res))
	n.leaderChanges.Add(1)
	n.resetHealth(true)
	n.lookAtHealth()
	select {
	case n.versionsNow <- struct{}{}:
	default:
	}
	n.log.Info("leadership gained", "node", n.cfg.NodeID, "term", n.r().CurrentTerm(),
		"epoch", res.Epoch, "grace", grace.String(), "lease_bound", res.LeaseBound.String(), "planned_handoff", res.Planned)
}

func (n *Node) commitEpoch() (epochResult, error) {
	if err := n.r().Barrier(applyTimeout).Error(); err != nil {
		return epochResult{}, fmt.Errorf("barrier: %w", err)
	}
	r, index, err := n.applyIndexed(command{Op: opEpoch, Node: n.cfg.NodeID, Addr: n.cfg.Addr, OpsAddr: n.cfg.OpsAddr,
		LeaderLease: n.cfg.LeaderLeaseTimeout, ClusterID: newClusterID()})
	if err != nil {
		return epochResult{}, err
	}
	n.epochIndex.Store(index)
	return r.(epochResult), nil
}

// revoke ends the term: every session ends with NOT_LEADER at once.
func (n *Node) revoke() {
	n.leading.Store(false)
	n.srv.EndTerm(server.ReasonNotLeader, n.LeaderHint())
	n.log.Info("leadership lost", "node", n.cfg.NodeID, "term", n.r().CurrentTerm(), "epoch", n.epoch.Load())
}

// lowerBound commits a lower lease bound once two looks in a row found no
// session (in the table, or let through NoteLease since the look before)
// that needs the current one. Never during the epoch's grace: clients of
// an earlier leader may still believe in their locks for up to the bound
// it inherited.
func (n *Node) lowerBound() {
	n.raiseMu.Lock()
	defer n.raiseMu.Unlock()
	cur := n.bound()
	if n.srv.GraceRemaining() > 0 {
		n.lowerTo = cur
		return
	}
	need := max(n.srv.MaxLease(), time.Duration(n.noted.Swap(0)))
	prev := n.lowerTo
	n.lowerTo = need
	target := max(need, prev)
	if target >= cur {
		return
	}
	// From here on no lease above target passes NoteLease without this
	// mutex; one that read the old fastBound was noted before this store,
	// so the second look finds it.
	n.fastBound.Store(int64(target))
	target = max(target, n.srv.MaxLease(), time.Duration(n.noted.Load()))
	if target >= cur {
		n.fastBound.Store(int64(cur))
		return
	}
	if hook := n.beforeLowerCommit.Swap(nil); hook != nil {
		(*hook)()
	}
	if err := n.apply(command{Op: opBound, Epoch: n.epoch.Load(), Bound: target}); err != nil {
		n.log.Warn("cannot lower the lease bound", "to", target.String(), "err", err)
		return // fastBound stays low: a longer lease raises the bound again
	}
	n.fastBound.Store(int64(target))
}

// recordServed commits, once per epoch, that this leader has served its
// whole grace: from then on a crash leaves the next leader only this
// leader's own clients to cover, not what this epoch inherited.
func (n *Node) recordServed() {
	e := n.epoch.Load()
	if n.served == e || !n.srv.Served() {
		return
	}
	if err := n.apply(command{Op: opServed, Epoch: e}); err != nil {
		n.log.Warn("cannot record that the grace was served", "epoch", e, "err", err)
		return
	}
	n.served = e
}

// joinedEvery is how often the leader looks at its members' health, and
// for members that hold the log and are not yet recorded (a Raft write
// only when there are some).
const joinedEvery = time.Second

// recordJoined commits the members that acknowledged this epoch's entries
// and are not yet recorded as holding the log (see opJoined).
func (n *Node) recordJoined() {
	st := n.fsm.get()
	var add []string
	for _, s := range n.r().GetConfiguration().Configuration().Servers {
		id := string(s.ID)
		if slices.Contains(st.Joined, id) {
			continue
		}
		if id == n.cfg.NodeID || n.lease.holdsLog(s.ID, n.epochIndex.Load()) {
			add = append(add, id)
		}
	}
	if len(add) == 0 {
		return
	}
	if err := n.apply(command{Op: opJoined, Members: add}); err != nil {
		n.log.Warn("cannot record the members that hold the log", "members", add, "err", err)
		return
	}
	// A member recorded here that loses its data is refused as a founder.
	n.log.Info("members recorded as holding the log", "added", add, "joined", strings.Join(n.fsm.get().Joined, ","))
}

// Handover is the planned stop of a leader (SIGTERM), run by the leader
// loop (see handover). On a follower it does nothing.
func (n *Node) Handover() error {
	if !n.started {
		return nil
	}
	done := make(chan error, 1)
	select {
	case n.handovers <- done:
		return <-done
	case <-n.done:
		return nil
	}
}

// handover is Handover on the leader loop (docs/protocol.md, section 14, "A
// planned handover: the list"): the successor is chosen and committed
// first, so that it holds resumes; then, at one moment, confirmations stop
// and the list is taken, and every session is told (NOT_LEADER naming the
// successor to the claims of version 3, holders first; SHUTDOWN to the
// others); the holders told SHUTDOWN are drained for HandoverDrain, and
// those not seen to close are listed; the list is committed in entries of
// at most 64 KiB, then the handoff that counts and digests it (the rest of
// this epoch's own grace); then leadership is transferred to the
// successor. A list that cannot be committed whole leaves no handoff: the
// successor starts as after a crash. While a voter does not speak version
// 3 (a rolling upgrade), no list is written, and the handoff covers the
// lease bound unless every holder was seen to close, as before.
func (n *Node) handover() error {
	if !n.leading.Load() {
		return nil
	}
	epoch := n.epoch.Load()
	graceEnds := n.now().Add(n.srv.GraceRemaining())
	v3 := n.giving.Load()
	succ, succAddr := n.chooseSuccessor()
	if succ != "" {
		if err := n.apply(command{Op: opSuccessor, Epoch: epoch, Node: succ}); err != nil {
			n.log.Warn("cannot record the successor of the handover", "successor", succ, "err", err)
		} else {
			// Until the successor has applied the entry, it does not know
			// that it is to hold resumes: its clients would be sent back
			// here. It learns of the commit from the next replication
			// message (sent within Raft's CommitTimeout: heartbeats do not
			// carry it), and applies it on a goroutine of its own: wait for
			// its acknowledgement of a message sent a heartbeat interval
			// (HeartbeatTimeout/10) after that, so that it has had that
			// long to apply it.
			after := n.now().Add(n.commitTimeout + n.cfg.HeartbeatTimeout/10)
			for deadline := after.Add(n.cfg.HeartbeatTimeout); !n.lease.ackedSince(raft.ServerID(succ), after) && n.now().Before(deadline); {
				time.Sleep(n.cfg.HeartbeatTimeout / 50)
			}
		}
	}
	n.raiseMu.Lock()
	n.leading.Store(false)
	h := n.srv.HandOver(succAddr)
	n.raiseMu.Unlock()
	allClosed := false
	select {
	case <-h.Drained():
		allClosed = true
	case <-time.After(n.cfg.HandoverDrain):
	}
	list := h.List()
	handoff := max(graceEnds.Sub(n.now()), 0)
	cmd := command{Op: opHandoff, Epoch: epoch}
	if v3 {
		lc, err := n.recordList(epoch, list)
		if err != nil {
			return fmt.Errorf("planned handover: the list (no handoff: the next leader waits as after a crash): %w", err)
		}
		cmd = lc
		cmd.Op, cmd.Epoch = opHandoff, epoch
	} else if !allClosed {
		handoff = max(handoff, n.bound())
	}
	if handoffZero() {
		n.log.Warn("handoff forced to 0 (faultinject build): the next leader may grant while holders still believe")
		handoff = 0
	}
	cmd.Bound = handoff
	if err := n.apply(cmd); err != nil {
		return fmt.Errorf("commit handoff: %w", err)
	}
	start := time.Now()
	var f raft.Future
	if succ != "" {
		f = n.r().LeadershipTransferToServer(raft.ServerID(succ), raft.ServerAddress(n.memberAddress(succ)))
	} else {
		f = n.r().LeadershipTransfer()
	}
	if err := f.Error(); err != nil && succ != "" {
		// The successor did not take it (it went away meanwhile): Raft
		// picks another; its resumes are held by nobody, and answered
		// once it serves.
		n.log.Warn("leadership transfer to the chosen successor failed; transferring to any", "successor", succ, "err", err)
		for deadline := time.Now().Add(applyTimeout); ; {
			f = n.r().LeadershipTransfer()
			if err := f.Error(); !errors.Is(err, raft.ErrLeadershipTransferInProgress) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // the failed one is still winding down
		}
	}
	if err := f.Error(); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	listed := 0
	if list != nil {
		listed = len(list.Claims)
	}
	n.log.Info("leadership handed over", "node", n.cfg.NodeID, "term", n.r().CurrentTerm(), "epoch", epoch, "successor", succ,
		"listed", listed, "all_closed", allClosed, "handoff", handoff.Round(time.Millisecond).String(), "transfer", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// memberAddress is member id's Raft address in the configuration.
func (n *Node) memberAddress(id string) string {
	for _, sv := range n.r().GetConfiguration().Configuration().Servers {
		if string(sv.ID) == id {
			return string(sv.Address)
		}
	}
	return ""
}

// Close stops the leader loop and Raft (no membership change: the node
// stays a member and can come back with its data directory).
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	if n.started {
		<-n.done
	}
	if n.starting != nil {
		<-n.starting
	}
	var err error
	if r := n.r(); r != nil {
		err = r.Shutdown().Error()
	}
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
	if err := n.r().AddVoter(raft.ServerID(id), raft.ServerAddress(memberAddr(raftAddr)), 0, applyTimeout).Error(); err != nil {
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
	if err := n.r().RemoveServer(raft.ServerID(id), 0, applyTimeout).Error(); err != nil {
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
	r := n.r()
	if r == nil {
		return nil, server.ErrNotLeader
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read membership: %w", err)
	}
	return f.Configuration().Servers, nil
}

// Leading reports whether this node leads with its epoch committed.
func (n *Node) Leading() bool { return n.leading.Load() }

// LeaderOpsAddr is the leader's advertised ops address ("" if unknown, or
// if the leader Raft names is not a current member) and whether this node
// is the leader.
func (n *Node) LeaderOpsAddr() (string, bool) {
	if n.leading.Load() {
		return n.cfg.OpsAddr, true
	}
	a, ok := n.leaderAddrs()
	if !ok {
		return "", false
	}
	return a.OpsAddr, false
}

// View is GET /v1/cluster. A founder still asking the others whether to
// bootstrap is a follower with no term, and lists the founders.
func (n *Node) View() server.ClusterView {
	st := n.fsm.get()
	v := server.ClusterView{
		NodeID:     n.cfg.NodeID,
		ClusterID:  st.ClusterID,
		Role:       "follower",
		Epoch:      st.Epoch,
		LeaseBound: st.LeaseBound,
	}
	r := n.r()
	if r == nil {
		for _, p := range n.cfg.Peers {
			v.Members = append(v.Members, server.ClusterMember{ID: p.ID, RaftAddr: p.RaftAddr, Voter: true})
		}
		return v
	}
	v.Term = r.CurrentTerm()
	switch r.State() {
	case raft.Leader:
		v.Role = "leader"
	case raft.Candidate:
		v.Role = "candidate"
	}
	if _, id := r.LeaderWithID(); id != "" && n.isMember(id) {
		a := st.Nodes[string(id)]
		if string(id) == n.cfg.NodeID {
			a = nodeAddrs{Addr: n.cfg.Addr, OpsAddr: n.cfg.OpsAddr}
		}
		v.Leader = &server.ClusterNode{ID: string(id), Addr: a.Addr, OpsAddr: a.OpsAddr}
	}
	if n.leading.Load() {
		v.GraceRemaining = n.srv.GraceRemaining()
		v.Resumable = n.giving.Load()
	} else {
		v.Resumable = n.mayGive()
	}
	_, leaderID := r.LeaderWithID()
	health := map[raft.ServerID]MemberHealth{}
	hs := n.Health()
	for _, h := range hs {
		health[h.ID] = h
	}
	if conf, err := n.members(); err == nil {
		healthy := len(hs) > 0
		voters, votersHealthy := 0, 0
		for _, s := range conf {
			m := server.ClusterMember{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter, Role: "follower"}
			switch {
			case s.ID == leaderID:
				m.Role = "leader"
			case s.Suffrage != raft.Voter:
				m.Role = "nonvoter"
			}
			if h, ok := health[s.ID]; ok {
				m.Health = &server.MemberHealth{Reachable: h.Reachable, LastContact: h.LastContact, Failures: h.Failures,
					IndexLag: h.IndexLag, Healthy: h.Healthy, Since: h.Since}
				healthy = healthy && h.Healthy
				if m.Voter && h.Healthy {
					votersHealthy++
				}
			} else if len(hs) > 0 {
				m.Health = notYetAnswered()
				healthy = false
			}
			if m.Voter {
				voters++
			}
			v.Members = append(v.Members, m)
		}
		if len(hs) > 0 {
			v.Healthy = &healthy
			v.VotersHealthy = votersHealthy
			v.FailureTolerance = votersHealthy - (voters/2 + 1)
		}
	}
	return v
}
