package clusterharness

import (
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// The control: proof that the checker can fail. A new leader must not
// grant before a cut-off old leader has stopped confirming its holders;
// the failover grace is what waits. With the grace switched off (the
// faultinject build and BATON_TEST_DISABLE_GRACE=1) the checker must
// report two holders of one name.
//
// Why the old leader needs slow timers for it: hashicorp/raft makes a
// leader that has lost its quorum step down LeaderLeaseTimeout after its
// last contact, and LeaderLeaseTimeout may not exceed HeartbeatTimeout,
// while a follower stands for election only HeartbeatTimeout (randomised
// up to twice that) after its last contact. With the same timers on every
// node the old leader therefore ends its sessions (NOT_LEADER) before a new
// leader can exist, and a grace-less failover after a cut link would
// usually still not overlap. Nodes may run with different timers, though:
// here the leader S has 3 s timers and the others the defaults (200 ms),
// so the others elect a new leader some 2.5 s before S notices, and during
// those seconds S still confirms its holder's heartbeats.
//
// The run: the cluster starts with the default timers; its first leader
// becomes S: the others restart with 10 s timers, then S restarts with
// 3 s ones and wins the election that follows (no other node stands for
// 10 s), then the others restart with the defaults. A holder takes "ctl"
// on S and keeps writing to the register; a probe whose client knows only
// the other two waits for "ctl" (NOT_LEADER from both until S is cut
// off); then S's Raft link goes down for 5 s. (Which node wins a first
// election depends on how the founders bootstrap, so the slow timers go
// to whichever did.)

const (
	ctlName = "ctl"
	slowFor = 3 * time.Second // the old leader's Raft timers
)

// TestControlWithoutGraceOverlaps: with the grace off, the checker reports
// the overlap (and the register refuses the old holder's late writes).
func TestControlWithoutGraceOverlaps(t *testing.T) {
	needFaults(t)
	v, probe, holder := cutWithSlowOldLeader(t, faultBin, []string{"BATON_TEST_DISABLE_GRACE=1"})
	if len(v.overlaps) == 0 {
		t.Fatalf("grace off: the checker found no overlap (probe %v, holder %v): it has not been shown able to fail", probe, holder)
	}
	t.Logf("CONTROL (grace off): the checker reports %d overlaps and %d other violations, as it must; the first:", len(v.overlaps), len(v.bad))
	for i, s := range v.violations() {
		if i == 4 {
			t.Logf("  (%d more)", len(v.violations())-i)
			break
		}
		t.Log("  " + s)
	}
}

// TestSlowOldLeaderGraceHolds: the same run with the grace on must pass
// the checker: the new leader's grace covers the old leader's own lease
// timeout, whatever its timers.
func TestSlowOldLeaderGraceHolds(t *testing.T) {
	needFaults(t)
	v, probe, holder := cutWithSlowOldLeader(t, batonBin, nil)
	for _, s := range v.violations() {
		t.Error(s)
	}
	t.Logf("grace on, old leader with %v timers: holder %v; probe %v (%v after the holder's end)",
		slowFor, holder, probe, probe.granted.Sub(holder.ended).Round(time.Millisecond))
}

// cutWithSlowOldLeader runs the control's scenario with bin and env and
// returns the checker's verdict over every hold, with the probe's and the
// holder's.
func cutWithSlowOldLeader(t *testing.T, bin string, env []string) (v verdict, probe, holder *hold) {
	t.Helper()
	nw := newNetwork(t, 3)
	slow := []string{"-raft-heartbeat-timeout=" + slowFor.String(), "-raft-election-timeout=" + slowFor.String(),
		"-raft-leader-lease-timeout=" + slowFor.String()}
	late := []string{"-raft-heartbeat-timeout=10s", "-raft-election-timeout=10s"}
	c := newCluster(t, nw, bin, env, 3)
	c.startAll()
	c.settle()
	s := c.leader()
	var others []int
	for i := 1; i <= 3; i++ {
		if i != s {
			others = append(others, i)
		}
	}
	for _, i := range others {
		c.kill(i)
		c.node(i).flags = late
		c.start(i)
		c.waitFollows(i, s)
	}
	c.kill(s)
	c.node(s).flags = slow
	c.start(s)
	if l := c.waitLeader(); l != s {
		t.Fatalf("n%d won the election, want n%d (the only node with timers under 10 s)", l, s)
	}
	for _, i := range others {
		c.kill(i)
		c.node(i).flags = nil
		c.start(i)
		c.waitFollows(i, s)
	}

	w := newWorkload()
	t.Cleanup(func() { w.stop() })
	w.loops(t, 8, 0, c.clientAddrs(), names)
	hc, err := baton.New(c.clientAddrs(), baton.WithLease(lease), baton.WithOwner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := w.acquire(hc, ctlName)
	if err != nil {
		t.Fatalf("holder: %v", err)
	}
	holderDone := make(chan *hold, 1)
	go func() { holderDone <- w.work(-1, l, time.Minute, 50*time.Millisecond) }()
	pc, err := baton.New(c.others(s), baton.WithLease(lease), baton.WithOwner("probe"))
	if err != nil {
		t.Fatal(err)
	}
	probeDone := make(chan *hold, 1)
	go func() {
		defer close(probeDone)
		for w.ctx.Err() == nil {
			if l, err := w.acquire(pc, ctlName); err == nil {
				probeDone <- w.work(-2, l, 200*time.Millisecond, 0)
				return
			}
			w.idle(50 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond) // the probe is turned away by the others meanwhile

	cutAt := time.Now()
	nw.setRaftLink(t, s, false)
	select {
	case holder = <-holderDone:
	case <-time.After(grantWait):
		t.Fatalf("the holder on n%d did not see its loss within %v of the cut", s, grantWait)
	}
	select {
	case probe = <-probeDone:
	case <-time.After(grantWait):
		t.Fatalf("the probe got no grant within %v of the cut; Acquire errors:%s", grantWait, w.errorSummary())
	}
	if rest := cutFor - time.Since(cutAt); rest > 0 {
		time.Sleep(rest)
	}
	nw.setRaftLink(t, s, true)
	t.Logf("cut at %s: holder %v; probe %v", cutAt.Format("15:04:05.000"), holder, probe)
	return check(w.stop()), probe, holder
}
