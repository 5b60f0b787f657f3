package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/server"
)

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

// Leading reports whether this node leads with its epoch committed.
func (n *Node) Leading() bool { return n.leading.Load() }

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
