package clusterharness

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton"
)

// Two process-level scenarios, each built to show one way two clients can
// hold a lock at once after a failover, deterministically: every step
// waits for the state it needs, and the timings leave seconds of margin on
// both sides. Each runs against the normal build (it must pass the
// checker) and, in the mutation gate, against the faultinject build with
// the one safety rule it tests switched off (the checker must report the
// overlap).

// longLease is the lease of the scenarios' holders: long enough that a
// holder's belief outlasts an election and a handover by seconds, short
// enough to keep the runs to tens of seconds.
const longLease = 10 * time.Second

// startBeliever starts one session of a believer of name on node i and
// waits until it holds; holdFor is long (the scenario ends it).
func startBeliever(t *testing.T, c *testCluster, w *workload, id int, name string, i int, pipeline bool) *bsession {
	t.Helper()
	b := &believer{w: w, id: id, name: name, lease: longLease, pipeline: pipeline, every: 100 * time.Millisecond}
	s := newBelieverSession(i)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		b.session(c.nw.clientAddr(i), s, time.Hour)
	}()
	c.eventually(startWait, func() bool { return s.held.Load() }, "believer %d: no grant of %q on n%d", id, name, i)
	return s
}

// probe starts a Go client that waits for name on addrs (retrying after
// errors) and holds it for a moment; the channel yields its hold.
func (w *workload) probe(t *testing.T, addrs []string, id int, name string) <-chan *hold {
	t.Helper()
	pc, err := baton.New(addrs, baton.WithLease(lease), baton.WithOwner(fmt.Sprintf("probe-%d", id)))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *hold, 1)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(got)
		for w.ctx.Err() == nil {
			if l, err := w.acquire(pc, name); err == nil {
				got <- w.work(id, l, 200*time.Millisecond, 0)
				return
			}
			w.idle(50 * time.Millisecond)
		}
	}()
	return got
}

// await waits for a probe's hold, failing the test after within.
func await(t *testing.T, w *workload, got <-chan *hold, within time.Duration, what string) *hold {
	t.Helper()
	select {
	case h, ok := <-got:
		if ok {
			return h
		}
	case <-time.After(within):
	}
	t.Fatalf("%s: no grant within %v; Acquire errors:%s", what, within, w.errorSummary())
	return nil
}

// others is every node's client address but those of not.
func (c *testCluster) others(not ...int) []string {
	var a []string
	for _, nd := range c.nodes {
		if !slices.Contains(not, nd.i) {
			a = append(a, c.nw.clientAddr(nd.i))
		}
	}
	return a
}

// TestHandoverInsideGraceKeepsGrace: a leader inside its failover grace,
// sent SIGTERM, must hand on what is left of that grace, not a grace of
// 0. Five nodes; X holds "jobs" (10 s lease) on the leader L1; L1 drops
// off the network (its Raft link and X's link cut: X is told nothing and
// believes until 0.8 × lease after its last confirmed heartbeat); L2 takes
// over and, 0.5 s into its grace, gets SIGTERM; the next leader must not
// grant "jobs" to the waiting Y before X's belief ends.
func TestHandoverInsideGraceKeepsGrace(t *testing.T) {
	needFaults(t)
	v, x, y := handoverInsideGrace(t, batonBin, nil)
	t.Logf("X %v\nY %v (granted %v after X's belief ended)", x, y, y.granted.Sub(x.ended).Round(time.Millisecond))
	for _, s := range v.violations() {
		t.Error(s)
	}
}

// handoverInsideGrace runs finding 1's scenario with bin and env and
// returns the checker's verdict with X's and Y's holds.
func handoverInsideGrace(t *testing.T, bin string, env []string) (v verdict, x, y *hold) {
	t.Helper()
	nw := newNetwork(t, 5)
	c := newCluster(t, nw, bin, env, 5)
	c.startAll()
	c.settle()
	l1 := c.leader()
	w := newWorkload()
	t.Cleanup(func() { w.stop() })
	xs := startBeliever(t, c, w, 1, "jobs", l1, false)

	cutAt := time.Now()
	xs.setLink(linkCut)
	nw.setRaftLink(t, l1, false)
	t.Cleanup(func() { nw.setRaftLink(t, l1, true) })
	l2 := c.waitLeader(l1)
	readyAt := time.Now()
	yc := w.probe(t, c.others(l1), 2, "jobs") // queued at l2, in its grace
	time.Sleep(time.Until(readyAt.Add(500 * time.Millisecond)))
	if g, err := c.view(l2); err != nil || g.GraceRemainingMs <= 0 {
		t.Fatalf("n%d is not inside its grace 0.5 s after it took over (view %+v, %v): the scenario needs it", l2, g, err)
	}
	termAt := time.Now()
	c.terminate(l2)
	t.Logf("cut n%d at %s; n%d ready %v later, SIGTERM %v later (%s)", l1, cutAt.Format("15:04:05.000"), l2,
		readyAt.Sub(cutAt).Round(time.Millisecond), termAt.Sub(cutAt).Round(time.Millisecond), c.node(l2).handoverNote())
	y = await(t, w, yc, grantWait, "Y")
	<-xs.done
	holds, writes := w.stop()
	return check(holds, writes), xs.hold, y
}

// TestPausedLeaderConfirmsNothing: a leader paused by SIGSTOP, while
// another node took over and serves, must not confirm on SIGCONT a
// heartbeat that its holder sent during the pause. Three nodes; four
// holders (10 s leases) on the leader L1, each with its heartbeats
// pipelined, confirm a heartbeat just before L1 is stopped; L2 takes over
// (its grace: 10 s plus twice the leader lease); each holder sends one
// more heartbeat 5.9 s into the pause and L1 gets SIGCONT at 6 s. Their
// links then drop L1's ERROR and close (a holder told nothing). Had L1
// answered ACQUIRED, each holder would believe until 5.9 + 8 = 13.9 s,
// while L2 grants the waiting probes some 11 s after the stop. Four
// holders, not one: the old leader's step-down on resume races the
// sessions' answers, and with the rule off one answer in four is enough.
func TestPausedLeaderConfirmsNothing(t *testing.T) {
	needFaults(t)
	v, believers, probes := pausedLeader(t, batonBin, nil)
	for i := range believers {
		t.Logf("holder %v\n  probe %v", believers[i], probes[i])
	}
	for _, s := range v.violations() {
		t.Error(s)
	}
}

// Timings of the paused-leader scenario (from the SIGSTOP).
const (
	pauseFor  = 6 * time.Second
	lateBeat  = 100 * time.Millisecond // the late heartbeat goes this long before SIGCONT
	pausedFor = 4                      // holders
)

// pausedLeader runs finding 5's scenario with bin and env and returns the
// checker's verdict with the holders' and the probes' holds.
func pausedLeader(t *testing.T, bin string, env []string) (v verdict, holders, probes []*hold) {
	t.Helper()
	nw := newNetwork(t, 3)
	c := newCluster(t, nw, bin, env, 3)
	c.startAll()
	c.settle()
	l1 := c.leader()
	w := newWorkload()
	t.Cleanup(func() { w.stop() })
	var ss []*bsession
	for i := range pausedFor {
		ss = append(ss, startBeliever(t, c, w, i, fmt.Sprintf("paused-%d", i), l1, true))
	}
	for _, s := range ss {
		s.beat()
	}
	time.Sleep(50 * time.Millisecond) // their replies: each belief now runs to about stop + 8 s

	stopAt := time.Now()
	c.signal(l1, syscall.SIGSTOP)
	t.Cleanup(func() { c.node(l1).p.Cmd.Process.Signal(syscall.SIGCONT) })
	for _, s := range ss {
		s.setLink(linkDeaf)
	}
	l2 := c.waitLeader(l1)
	readyAt := time.Now()
	if took := readyAt.Sub(stopAt); took > 2*time.Second {
		t.Fatalf("n%d took over %v after the stop: the scenario needs it within 2 s to leave its margin", l2, took)
	}
	var pcs []<-chan *hold
	for i := range pausedFor {
		pcs = append(pcs, w.probe(t, c.others(l1), 100+i, fmt.Sprintf("paused-%d", i)))
	}
	time.Sleep(time.Until(stopAt.Add(pauseFor - lateBeat)))
	for _, s := range ss {
		s.beat()
	}
	time.Sleep(time.Until(stopAt.Add(pauseFor)))
	c.signal(l1, syscall.SIGCONT)
	t.Logf("stopped n%d at %s; n%d ready %v later; SIGCONT at %v", l1, stopAt.Format("15:04:05.000"), l2,
		readyAt.Sub(stopAt).Round(time.Millisecond), pauseFor)
	for _, pc := range pcs {
		probes = append(probes, await(t, w, pc, grantWait, "probe"))
	}
	for _, s := range ss {
		<-s.done
		holders = append(holders, s.hold)
	}
	all, writes := w.stop()
	return check(all, writes), holders, probes
}
