package cluster

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// leaderLease is the leader's own lease, anchored at send times: the leader
// may grant and confirm while
//
//	now < (the latest send time that a quorum of voters acknowledged) + timeout
//
// with timeout twice the leader lease timeout (Node passes it). A voter's
// acknowledgement is a reply in the same term to an AppendEntries (a
// heartbeat or a replication) that this node sent. A voter that replied had
// not yet moved to a later term when it did, so any leader of a later term
// was elected after that reply, and so after the send: this node confirms
// nothing later than timeout after the new leader's election, and the new
// leader's grace (twice the longest leader lease timeout, plus the lease
// bound) covers what it confirmed.
//
// hashicorp/raft's own leader lease counts the arrival of responses, and is
// checked on a timer: a leader paused by SIGSTOP (or a long GC pause) wakes
// with it still valid and serves until the timer runs, while a newer leader
// may already exist. This one is checked on every grant and confirmation
// against the clock, so a paused leader fails closed the moment it wakes.
// The clock counts a suspend of the machine (package clock): the
// monotonic clock stops during one, and a leader whose host slept past its
// lease would otherwise wake up finding it valid. The argument above also
// assumes that this clock and the new leader's run at about the same rate
// (docs/operations.md gives the bound).
type leaderLease struct {
	now     func() time.Time // the clock (Config.Now): it counts a suspend
	base    time.Time        // the origin of every stored time, a reading of now
	timeout time.Duration
	self    raft.ServerID
	// config gives the current configuration (set once Raft runs).
	config atomic.Pointer[func() raft.Configuration]

	mu    sync.Mutex
	acked map[raft.ServerID]int64 // per peer: latest acknowledged send, ns since base
	// lastLog is each peer's last log index, as its latest reply said.
	lastLog map[raft.ServerID]uint64
	// contact is each peer's latest reply's arrival, and failing the
	// start of its current run of failed requests (both ns since base;
	// failing is 0 while requests succeed): what member health reads.
	contact, failing map[raft.ServerID]int64
	failures         map[raft.ServerID]uint64 // failed requests in the current run
	// until is when the lease runs out, ns since base; 0 when never held.
	until atomic.Int64
}

func newLeaderLease(self raft.ServerID, timeout time.Duration, now func() time.Time) *leaderLease {
	return &leaderLease{now: now, base: now(), timeout: timeout, self: self, acked: map[raft.ServerID]int64{}, lastLog: map[raft.ServerID]uint64{},
		contact: map[raft.ServerID]int64{}, failing: map[raft.ServerID]int64{}, failures: map[raft.ServerID]uint64{}}
}

// setConfig gives the lease the current configuration's source.
func (l *leaderLease) setConfig(f func() raft.Configuration) { l.config.Store(&f) }

// since is t, a reading of now, as ns since base.
func (l *leaderLease) since(t time.Time) int64 { return int64(t.Sub(l.base)) }

// valid reports whether the lease holds at now, a reading of l.now.
func (l *leaderLease) valid(now time.Time) bool {
	if leaderLeaseOff() {
		return true
	}
	return l.since(now) < l.until.Load()
}

// remaining is how long the lease still holds at now (0 if it does not).
func (l *leaderLease) remaining(now time.Time) time.Duration {
	return max(time.Duration(l.until.Load()-l.since(now)), 0)
}

// ack records that peer acknowledged a send made at sent (ns since base),
// with lastLog its last log index, and moves the lease on.
func (l *leaderLease) ack(peer raft.ServerID, sent int64, lastLog uint64) {
	now := l.since(l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastLog[peer] = max(l.lastLog[peer], lastLog)
	l.contact[peer] = now
	l.failing[peer], l.failures[peer] = 0, 0
	if sent <= l.acked[peer] {
		return
	}
	l.acked[peer] = sent
	l.recomputeLocked()
}

// ackedSince reports whether peer acknowledged a send made at t or later
// (a reading of now).
func (l *leaderLease) ackedSince(peer raft.ServerID, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked[peer] >= l.since(t)
}

// failed records a request to peer that got no reply.
func (l *leaderLease) failed(peer raft.ServerID) {
	now := l.since(l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing[peer] == 0 {
		l.failing[peer] = now
	}
	l.failures[peer]++
}

// peerContact is what the leader knows of its contact with one peer.
type peerContact struct {
	lastContact int64  // arrival of the latest reply, ns since base; 0: never
	failingFrom int64  // start of the current run of failures; 0: none
	failures    uint64 // failed requests in that run
	lastLog     uint64 // the peer's last log index, as it said
}

// contactOf returns what the leader knows of its contact with peer.
func (l *leaderLease) contactOf(peer raft.ServerID) peerContact {
	l.mu.Lock()
	defer l.mu.Unlock()
	return peerContact{lastContact: l.contact[peer], failingFrom: l.failing[peer], failures: l.failures[peer], lastLog: l.lastLog[peer]}
}

// holdsLog reports whether peer said its log reaches index.
func (l *leaderLease) holdsLog(peer raft.ServerID, index uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastLog[peer] >= index
}

// recomputeLocked sets until from the acknowledgements of the current
// voters. mu must be held.
func (l *leaderLease) recomputeLocked() {
	cf := l.config.Load()
	if cf == nil {
		return
	}
	var voters int
	selfVoter := false
	var times []int64
	for _, s := range (*cf)().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID == l.self {
			selfVoter = true
			continue
		}
		times = append(times, l.acked[s.ID])
	}
	quorum := voters/2 + 1
	need := quorum // acknowledgements from others
	if selfVoter {
		need-- // this node agrees with itself at every instant
	}
	if need <= 0 {
		// A cluster of one: nobody else can be elected while it runs.
		l.until.Store(1<<63 - 1)
		return
	}
	if len(times) < need {
		return
	}
	slices.Sort(times)
	q := times[len(times)-need] // the need-th latest acknowledgement
	if q == 0 {
		return
	}
	if u := q + int64(l.timeout); u > l.until.Load() {
		l.until.Store(u)
	}
}

// leaseTransport is Raft's transport with the leader lease's bookkeeping:
// every AppendEntries this node sends is timed, and a reply in the same
// term acknowledges the send.
type leaseTransport struct {
	raft.Transport
	lease *leaderLease
}

func (t *leaseTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := t.lease.since(t.lease.now())
	err := t.Transport.AppendEntries(id, target, args, resp)
	switch {
	case err != nil:
		t.lease.failed(id)
	case resp.Term == args.Term:
		t.lease.ack(id, sent, resp.LastLog)
	}
	return err
}

// AppendEntriesPipeline is the transport's own: pipelined replication is
// not counted (heartbeats, sent every HeartbeatTimeout/10 to every peer
// whether or not replication is pipelined, keep the lease moving).
func (t *leaseTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	return t.Transport.AppendEntriesPipeline(id, target)
}

// errNoPreVote is what RequestPreVote returns over a transport without it.
var errNoPreVote = errors.New("cluster: transport does not support pre-vote")

func (t *leaseTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := t.Transport.(raft.WithPreVote)
	if !ok {
		return errNoPreVote
	}
	return pv.RequestPreVote(id, target, args, resp)
}

func (t *leaseTransport) Close() error {
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}
