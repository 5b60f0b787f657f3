package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The replicated state is small on purpose: what a new leader needs to be
// safe, nothing of the lock table (which lives in the leader's memory).
// Membership is Raft's own configuration, not part of it.
//
// The grace invariant it keeps (docs/operations.md states it for
// reviewers): every epoch records the grace it inherited; the next epoch's
// grace is never shorter than what any client of an earlier leader may
// still believe. After a crash that is the lease bound plus twice the
// longest leader lease, and, unless the crashed epoch's leader recorded
// that it served its own grace whole, never less than the grace that epoch
// inherited. After a planned handoff it is what the handing-over
// leader committed, which covers its own holders that did not close and
// the rest of its own inherited grace. The bound is never lowered by an
// epoch inside its grace, and every command that changes the grace's
// inputs names its epoch: one from an epoch that is no longer current is
// ignored.

// Command kinds of the log.
const (
	// opEpoch: a new leader takes the next epoch. It consumes the handoff
	// (if it belongs to the epoch before), records the grace the new epoch
	// inherits and the leader's advertised addresses.
	opEpoch = "epoch"
	// opBound: set the lease bound (raise before a longer lease is queued,
	// or lower lazily). Ignored unless Epoch is the current epoch.
	opBound = "bound"
	// opHandoff: a leader stopping on purpose records how long its clients
	// may still believe in their locks. Ignored unless Epoch is current.
	opHandoff = "handoff"
	// opJoined: members that hold the log (acknowledged an epoch entry);
	// such a member that loses its data must not rejoin under its id.
	opJoined = "joined"
	// opServed: the leader of Epoch has served its whole grace: what its
	// epoch inherited is discharged, and a crash from now on leaves only
	// its own clients to cover. Ignored unless Epoch is current.
	opServed = "served"
)

// Epoch space: tokens are Epoch<<counterBits | counter, so the epoch has
// 64-counterBits bits. A new leader refuses to take an epoch once fewer
// than epochReserve are left (tokens would stop rising at the wrap), and
// says so loudly from epochWarnLeft on.
const (
	maxEpoch     = 1<<(64-counterBits) - 1
	epochReserve = 1 << 10
	epochWarnAt  = maxEpoch - 1<<20
)

// command is one log entry, JSON-encoded (a few entries per leadership: a
// readable log is worth more than a few bytes).
type command struct {
	Op      string        `json:"op"`
	Epoch   uint64        `json:"epoch,omitempty"` // opBound, opHandoff: the epoch it belongs to
	Node    string        `json:"node,omitempty"`
	Addr    string        `json:"addr,omitempty"`
	OpsAddr string        `json:"ops_addr,omitempty"`
	Bound   time.Duration `json:"bound,omitempty"`
	// LeaderLease is the new leader's LeaderLeaseTimeout (opEpoch): how
	// long it would keep confirming heartbeats if later cut off.
	LeaderLease time.Duration `json:"leader_lease,omitempty"`
	// ClusterID is proposed by the first leader (opEpoch); later ones keep
	// the recorded one.
	ClusterID string   `json:"cluster_id,omitempty"`
	Members   []string `json:"members,omitempty"` // opJoined
}

// state is the replicated state machine's value, and its snapshot.
type state struct {
	// ClusterID names the cluster; set by its first epoch, never changed.
	ClusterID string `json:"cluster_id,omitempty"`
	// Epoch is raised once per leadership; tokens are Epoch<<40 | counter.
	Epoch uint64 `json:"epoch"`
	// Inherited is the failover grace the current epoch began with, and
	// GraceServed whether its leader has served it whole.
	Inherited   time.Duration `json:"inherited"`
	GraceServed bool          `json:"grace_served,omitempty"`
	// LeaseBound is the longest lease a leader may have granted or queued.
	LeaseBound time.Duration `json:"lease_bound"`
	// Handoff, when HandoffEpoch is the current epoch, replaces the crash
	// grace of the next leader: the current leader stopped on purpose.
	Handoff      time.Duration `json:"handoff"`
	HandoffEpoch uint64        `json:"handoff_epoch,omitempty"`
	// Nodes holds each node's advertised addresses and leader lease
	// timeout, as it recorded them when it last became leader.
	Nodes map[string]nodeAddrs `json:"nodes"`
	// Joined lists the members known to hold the log, sorted.
	Joined []string `json:"joined,omitempty"`
}

type nodeAddrs struct {
	Addr        string        `json:"addr"`
	OpsAddr     string        `json:"ops_addr"`
	LeaderLease time.Duration `json:"leader_lease,omitempty"`
}

// epochResult is what applying opEpoch returns to the new leader.
type epochResult struct {
	Epoch      uint64
	LeaseBound time.Duration
	// Grace is the failover grace of the new epoch (see graceOf).
	Grace time.Duration
	// Planned says the grace comes from the previous leader's handoff.
	Planned bool
}

// errEpochsExhausted refuses a new epoch near the end of the epoch space.
var errEpochsExhausted = fmt.Errorf("cluster: the epoch space is exhausted (%d of %d epochs used): a new leader could not keep fencing tokens rising, so none takes over; the cluster must be recreated", maxEpoch-epochReserve, maxEpoch)

// errStaleEpoch answers a bound or a handoff of an epoch that is no longer
// the current one: a leader that lost its term meanwhile (and may lead
// again in a later one) must not change what the current epoch relies on.
var errStaleEpoch = errors.New("cluster: command of an epoch that is no longer current")

// fsm implements raft.FSM over state.
type fsm struct {
	mu sync.Mutex
	st state
	// record, if set, is called (outside mu, on Raft's FSM goroutine) when
	// the cluster id or the members that hold the log change, so that the
	// node keeps them on disk: Raft replays the log into the state only
	// once a leader says what is committed, and a restarted node must be
	// able to answer a founder's question before that (bootstrap.go).
	record func(clusterID string, joined []string)
}

func newFSM() *fsm { return &fsm{st: state{Nodes: map[string]nodeAddrs{}}} }

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return fmt.Errorf("cluster: undecodable log entry %d: %w", l.Index, err)
	}
	f.mu.Lock()
	before, beforeJoined := f.st.ClusterID, len(f.st.Joined)
	res := f.applyLocked(c, l.Index)
	changed := f.st.ClusterID != before || len(f.st.Joined) != beforeJoined
	id, joined := f.st.ClusterID, slices.Clone(f.st.Joined)
	f.mu.Unlock()
	if changed && f.record != nil {
		f.record(id, joined)
	}
	return res
}

// applyLocked applies c. f.mu must be held.
func (f *fsm) applyLocked(c command, index uint64) any {
	switch c.Op {
	case opEpoch:
		return f.applyEpochLocked(c)
	case opBound:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		f.st.LeaseBound = c.Bound
		return nil
	case opHandoff:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		f.st.Handoff, f.st.HandoffEpoch = c.Bound, c.Epoch
		return nil
	case opServed:
		if c.Epoch != f.st.Epoch {
			return errStaleEpoch
		}
		f.st.GraceServed = true
		return nil
	case opJoined:
		for _, m := range c.Members {
			if !slices.Contains(f.st.Joined, m) {
				f.st.Joined = append(f.st.Joined, m)
			}
		}
		slices.Sort(f.st.Joined)
		return nil
	}
	return fmt.Errorf("cluster: unknown command %q in log entry %d", c.Op, index)
}

// applyEpochLocked starts the next epoch. Its grace is graceOf the state
// the previous epoch left; the handoff is used once.
func (f *fsm) applyEpochLocked(c command) any {
	if f.st.Epoch >= maxEpoch-epochReserve {
		return errEpochsExhausted
	}
	var maxLease time.Duration
	for _, n := range f.st.Nodes {
		maxLease = max(maxLease, n.LeaderLease)
	}
	maxLease = max(maxLease, c.LeaderLease)
	grace, planned := graceOf(f.st, maxLease)
	f.st.Epoch++
	f.st.Inherited, f.st.GraceServed = grace, false
	f.st.Handoff, f.st.HandoffEpoch = 0, 0
	if f.st.ClusterID == "" {
		f.st.ClusterID = c.ClusterID
	}
	if c.Node != "" {
		f.st.Nodes[c.Node] = nodeAddrs{Addr: c.Addr, OpsAddr: c.OpsAddr, LeaderLease: c.LeaderLease}
	}
	return epochResult{Epoch: f.st.Epoch, LeaseBound: f.st.LeaseBound, Grace: grace, Planned: planned}
}

// leaderLeaseFactor ties the leader's own lease to the grace: a leader
// confirms and grants until leaderLeaseSpan(its leader lease timeout)
// after the latest send a quorum acknowledged (openWith), and every crash
// grace budgets exactly leaderLeaseSpan of the longest leader lease
// timeout recorded for the old leader (graceOf). One constant, so that
// the lease can never outlast what the grace covers
// (TestLeaderLeaseWithinGrace).
const leaderLeaseFactor = 2

// leaderLeaseSpan is the leader lease of a node whose leader lease
// timeout is llt.
func leaderLeaseSpan(llt time.Duration) time.Duration { return leaderLeaseFactor * llt }

// graceOf is the failover grace of the epoch after st's. After a planned
// handoff by st's own epoch it is the handoff. Otherwise the previous
// leader may have crashed or been cut off: its clients may believe for
// the lease bound B after their last confirmation, which it made at most
// two leader lease timeouts after the last send a quorum acknowledged (and
// every such send came before this election), so B plus twice the longest
// leader lease any leader recorded covers them. And if st's epoch had not
// served its own grace whole, what it inherited may not have run out
// either: never less than that.
func graceOf(st state, maxLeaderLease time.Duration) (grace time.Duration, planned bool) {
	if st.HandoffEpoch != 0 && st.HandoffEpoch == st.Epoch {
		return st.Handoff, true
	}
	grace = st.LeaseBound + leaderLeaseSpan(maxLeaderLease)
	if !st.GraceServed {
		grace = max(grace, st.Inherited)
	}
	return grace, false
}

// newClusterID is a random cluster id, proposed with a first epoch.
func newClusterID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// get returns a copy of the state.
func (f *fsm) get() state {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Nodes = make(map[string]nodeAddrs, len(f.st.Nodes))
	for k, v := range f.st.Nodes {
		st.Nodes[k] = v
	}
	st.Joined = slices.Clone(f.st.Joined)
	return st
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	b, err := json.Marshal(f.get())
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st state
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]nodeAddrs{}
	}
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}
