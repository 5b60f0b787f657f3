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
	"os"
	"path/filepath"
	"slices"
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
