package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/server"
)

// Member health, as the leader sees it. The leader's transport times every
// request it sends to a peer and records every reply (lease.go): the time
// of the latest reply is the member's last contact, the log index the
// reply carries gives how far behind the member is. A member is healthy
// when it answered within unreachableAfter and is at most maxIndexLag
// entries behind; the leader says, per member, since when that has held.
// (raft-autopilot computes the same from stats it fetches over an RPC of
// the application's own; the leader already sees every reply, so Baton
// reads them where they arrive instead.)

// Health thresholds.
const (
	// maxIndexLag is how many log entries a healthy member may be behind
	// (raft-autopilot's default MaxTrailingLogs).
	maxIndexLag = 250
	// downReportEvery is how often a member that stays unreachable is
	// reported again in the log (with how long and how many failures).
	downReportEvery = 30 * time.Second
)

// unreachableAfter is how long a member may go without a reply before it
// counts as unreachable: five heartbeat timeouts (the leader sends every
// tenth of one), at least a second, so that a loaded machine's stalls do
// not flap it.
func (n *Node) unreachableAfter() time.Duration {
	return max(5*n.cfg.HeartbeatTimeout, time.Second)
}

// MemberHealth is one member's health as the leader sees it.
type MemberHealth struct {
	ID        raft.ServerID
	Reachable bool
	// LastContact is how long ago the member's latest reply arrived; -1
	// when none ever did.
	LastContact time.Duration
	// Failures is the number of requests without a reply since the last
	// reply.
	Failures uint64
	IndexLag uint64
	Healthy  bool
	// Since is how long Healthy has had its value (since the leader began
	// to watch, at most).
	Since time.Duration
}

// healthWatch keeps each member's health state and since when it holds,
// on the leader; reset when a term begins.
type healthWatch struct {
	mu       sync.Mutex
	state    map[raft.ServerID]healthState
	snapshot []MemberHealth // the latest look, for View and metrics
	leading  bool
	started  time.Time // when this leader began to watch
}

type healthState struct {
	healthy    bool
	since      time.Time
	reachable  bool
	downSince  time.Time
	lastReport time.Time
}

// resetHealth starts a new watch (a new term).
func (n *Node) resetHealth(leading bool) {
	n.health.mu.Lock()
	n.health.state = map[raft.ServerID]healthState{}
	n.health.snapshot = nil
	n.health.leading = leading
	n.health.started = n.now()
	n.health.mu.Unlock()
}

// lookAtHealth computes every member's health now, logs what changed (a
// member that went unreachable once, then every downReportEvery while it
// stays so, and its return), and keeps the result for View and the
// metrics. On the leader loop, while leading.
func (n *Node) lookAtHealth() {
	r := n.r()
	if r == nil {
		return
	}
	now := n.now() // the clock of the lease's contact times
	last := r.LastIndex()
	servers := r.GetConfiguration().Configuration().Servers
	w := &n.health
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started.IsZero() {
		w.started = now
	}
	if w.state == nil {
		w.state = map[raft.ServerID]healthState{}
	}
	snap := make([]MemberHealth, 0, len(servers))
	for _, s := range servers {
		h := MemberHealth{ID: s.ID, Reachable: true, Healthy: true}
		if string(s.ID) != n.cfg.NodeID {
			c := n.lease.contactOf(s.ID)
			h.LastContact = -1
			if c.lastContact != 0 {
				h.LastContact = max(now.Sub(n.lease.base.Add(time.Duration(c.lastContact))), 0)
			}
			h.Failures = c.failures
			young := now.Sub(w.started) < n.unreachableAfter() // it has not had the time to answer yet
			h.Reachable = (h.LastContact >= 0 && h.LastContact < n.unreachableAfter()) || (h.LastContact < 0 && young)
			if c.lastLog < last {
				h.IndexLag = last - c.lastLog
			}
			h.Healthy = h.Reachable && h.IndexLag <= maxIndexLag
		}
		st, seen := w.state[s.ID]
		if !seen {
			// A new leader has not heard from anyone yet: a member counts
			// as reachable until it has had unreachableAfter to answer.
			st.reachable = true
		}
		if !seen || st.healthy != h.Healthy {
			st.healthy, st.since = h.Healthy, now
		}
		if now.Sub(w.started) >= n.unreachableAfter() || h.Reachable {
			n.reportReachability(s.ID, &st, h, now)
		}
		w.state[s.ID] = st
		h.Since = now.Sub(st.since)
		snap = append(snap, h)
	}
	w.snapshot = snap
}

// reportReachability logs a member's loss of contact once, then every
// downReportEvery while it lasts, and its return; raft's own per-request
// errors about it are not logged (raftlog.go). w.mu must be held.
func (n *Node) reportReachability(id raft.ServerID, st *healthState, h MemberHealth, now time.Time) {
	switch {
	case !h.Reachable && st.reachable:
		st.reachable, st.downSince, st.lastReport = false, now, now
		n.log.Warn("cluster member unreachable", "member", string(id), "last_contact", lastContactText(h.LastContact), "failures", h.Failures)
	case !h.Reachable && now.Sub(st.lastReport) >= downReportEvery:
		st.lastReport = now
		n.log.Warn("cluster member still unreachable", "member", string(id), "for", now.Sub(st.downSince).Round(time.Second).String(),
			"last_contact", lastContactText(h.LastContact), "failures", h.Failures)
	case h.Reachable && !st.reachable:
		st.reachable = true
		n.log.Info("cluster member reachable again", "member", string(id), "after", now.Sub(st.downSince).Round(time.Second).String())
	case h.Reachable:
		st.reachable = true
	}
}

func lastContactText(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(time.Millisecond).String() + " ago"
}

// Health is the latest look at every member's health, and whether this
// node leads (followers do not know it: nil).
func (n *Node) Health() []MemberHealth {
	if !n.leading.Load() {
		return nil
	}
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	return append([]MemberHealth(nil), n.health.snapshot...)
}

// notYetAnswered is the health of a member the leader has not looked at
// yet (one added a moment ago): it has not answered, so it is not counted
// healthy until it does.
func notYetAnswered() *server.MemberHealth {
	return &server.MemberHealth{LastContact: -1}
}
