package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

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
