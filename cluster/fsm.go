package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The replicated state is small on purpose: what a new leader needs to be
// safe, nothing of the lock table (which lives in the leader's memory).
// Membership is Raft's own configuration, not part of it.

// Command kinds of the log.
const (
	// opEpoch: a new leader takes the next epoch. It consumes the handoff
	// bound and records the leader's advertised addresses.
	opEpoch = "epoch"
	// opBound: set the lease bound (raise before a longer lease is queued,
	// or lower lazily).
	opBound = "bound"
	// opHandoff: a leader stopping on purpose records how long its clients
	// may still believe in their locks (0 when every holder closed).
	opHandoff = "handoff"
)

// command is one log entry, JSON-encoded (a few entries per leadership: a
// readable log is worth more than a few bytes).
type command struct {
	Op      string        `json:"op"`
	Node    string        `json:"node,omitempty"`
	Addr    string        `json:"addr,omitempty"`
	OpsAddr string        `json:"ops_addr,omitempty"`
	Bound   time.Duration `json:"bound,omitempty"`
	// LeaderLease is the new leader's LeaderLeaseTimeout (opEpoch): how
	// long it would keep confirming heartbeats if later cut off.
	LeaderLease time.Duration `json:"leader_lease,omitempty"`
}

// state is the replicated state machine's value, and its snapshot.
type state struct {
	// Epoch is raised once per leadership; tokens are Epoch<<40 | counter.
	Epoch uint64 `json:"epoch"`
	// LeaseBound is the longest lease a leader may have granted or queued.
	LeaseBound time.Duration `json:"lease_bound"`
	// Handoff, when HasHandoff, replaces LeaseBound in the next leader's
	// grace: the previous leader stopped on purpose.
	Handoff    time.Duration `json:"handoff"`
	HasHandoff bool          `json:"has_handoff"`
	// Nodes holds each node's advertised addresses and leader lease
	// timeout, as it recorded them when it last became leader.
	Nodes map[string]nodeAddrs `json:"nodes"`
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
	Handoff    time.Duration
	HasHandoff bool
	// MaxLeaderLease is the longest LeaderLeaseTimeout any earlier leader
	// recorded: timers may differ between nodes, and a cut-off old leader
	// keeps confirming heartbeats for its own, not the new leader's.
	MaxLeaderLease time.Duration
}

// fsm implements raft.FSM over state.
type fsm struct {
	mu sync.Mutex
	st state
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
	defer f.mu.Unlock()
	switch c.Op {
	case opEpoch:
		f.st.Epoch++
		r := epochResult{Epoch: f.st.Epoch, LeaseBound: f.st.LeaseBound, Handoff: f.st.Handoff, HasHandoff: f.st.HasHandoff}
		for _, n := range f.st.Nodes {
			r.MaxLeaderLease = max(r.MaxLeaderLease, n.LeaderLease)
		}
		f.st.Handoff, f.st.HasHandoff = 0, false // used once, by this leader
		if c.Node != "" {
			f.st.Nodes[c.Node] = nodeAddrs{Addr: c.Addr, OpsAddr: c.OpsAddr, LeaderLease: c.LeaderLease}
		}
		return r
	case opBound:
		f.st.LeaseBound = c.Bound
		return nil
	case opHandoff:
		f.st.Handoff, f.st.HasHandoff = c.Bound, true
		return nil
	}
	return fmt.Errorf("cluster: unknown command %q in log entry %d", c.Op, l.Index)
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
