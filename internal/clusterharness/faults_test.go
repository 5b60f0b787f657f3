package clusterharness

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// faultKind is one kind of fault of the schedule.
type faultKind int

const (
	killLeader faultKind = iota
	stopLeader
	cutRaft
	killFollower
	termLeader
	killAll
	numKinds
)

func (k faultKind) String() string {
	return [...]string{
		"kill -9 of the leader",
		"SIGSTOP of the leader for 3 s",
		"the leader's Raft link cut for 5 s",
		"kill -9 of a follower (restarted)",
		"SIGTERM of the leader (restarted)",
		"kill -9 of every node, restart",
	}[k]
}

// Fault durations and windows.
const (
	stopFor  = 3 * time.Second
	cutFor   = 5 * time.Second
	downFor  = time.Second // a killed follower stays down this long
	quietFor = 2 * time.Second
	// grantWait bounds the time from a fault to the first grant after it.
	grantWait = 30 * time.Second
)

// names are the workload's locks.
var names = []string{"alpha", "beta", "gamma", "delta", "epsilon"}

// clientLoops is the number of workload loops.
const clientLoops = 24

// window is one fault and what followed it.
type window struct {
	kind      faultKind
	at        time.Time
	leader    int    // the node hit: the leader, or the follower killed
	epoch     uint64 // the leader's epoch before the fault
	first     *hold  // the first grant after the fault on a later epoch (any epoch for a follower's kill)
	toFirst   time.Duration
	newLeader int // the serving leader once the first grant came (0: none seen)
	// ready is the time from the fault to another node's /readyz saying
	// it leads (epoch committed; its grace may still run); 0 if not taken.
	ready time.Duration
	note  string // what the node's log says of a handover
}

// schedule is the list of faults: each kind once, or with
// BATON_CLUSTER_SCHEDULE=long BATON_CLUSTER_ROUNDS rounds of each (20).
func schedule(t *testing.T) []faultKind {
	rounds := 1
	if os.Getenv("BATON_CLUSTER_SCHEDULE") == "long" {
		rounds = 20
		if s := os.Getenv("BATON_CLUSTER_ROUNDS"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				t.Fatalf("BATON_CLUSTER_ROUNDS=%q: want a positive number", s)
			}
			rounds = n
		}
	}
	var ks []faultKind
	for range rounds {
		for k := range numKinds {
			ks = append(ks, k)
		}
	}
	return ks
}

// TestClusterFaults runs the schedule against three nodes under the
// workload and checks the run. It reports, per fault kind, the time from
// the fault to the first grant on the new leader.
func TestClusterFaults(t *testing.T) {
	needFaults(t)
	nw := newNetwork(t, 3)
	c := newCluster(t, nw, batonBin, nil, 3)
	c.startAll()
	c.settle()
	w := newWorkload()
	t.Cleanup(func() { w.stop() })
	w.loops(t, clientLoops, c.clientAddrs(), names)
	c.waitGrant(w, time.Now(), 0)

	var windows []*window
	for _, k := range schedule(t) {
		win := c.inject(w, k)
		windows = append(windows, win)
		ready := ""
		if win.ready > 0 {
			ready = fmt.Sprintf(" (another node ready as leader after %v)", win.ready.Round(time.Millisecond))
		}
		if win.note != "" {
			ready = " (" + win.note + ")"
		}
		t.Logf("fault %-36s on n%d (epoch %d): first grant %v later, epoch %d, leader now n%d%s",
			k, win.leader, win.epoch, win.toFirst.Round(time.Millisecond), win.first.token>>40, win.newLeader, ready)
		c.settle()
		c.waitGrant(w, time.Now(), 0)
		time.Sleep(quietFor) // the quiet window: the workload runs with no fault
	}
	holds, writes := w.stop()
	v := check(holds, writes)
	report(t, windows, v, w)
	for _, s := range v.violations() {
		t.Error(s)
	}
}

// report logs the run's counts and, per fault kind, the fault-to-first-grant
// times (p50, p99, max over its windows).
func report(t *testing.T, windows []*window, v verdict, w *workload) {
	t.Helper()
	byKind := map[faultKind][]time.Duration{}
	readyBy := map[faultKind][]time.Duration{}
	for _, win := range windows {
		byKind[win.kind] = append(byKind[win.kind], win.toFirst)
		if win.ready > 0 {
			readyBy[win.kind] = append(readyBy[win.kind], win.ready)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "RESULT: %d faults, %d grants checked, %d overlaps, %d other violations\n", len(windows), v.holds, len(v.overlaps), len(v.bad))
	fmt.Fprintf(&b, "  %-36s %3s %9s %9s %9s   %s\n", "fault to first grant on the new leader", "n", "p50", "p99", "max",
		"another node ready as leader: p50, p99")
	for k := range numKinds {
		ds := byKind[k]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		fmt.Fprintf(&b, "  %-36s %3d %9v %9v %9v", k, len(ds), pct(ds, 50).Round(time.Millisecond),
			pct(ds, 99).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
		if rs := readyBy[k]; len(rs) > 0 {
			slices.Sort(rs)
			fmt.Fprintf(&b, "   %v, %v", pct(rs, 50).Round(time.Millisecond), pct(rs, 99).Round(time.Millisecond))
		}
		b.WriteString("\n")
	}
	if s := w.errorSummary(); s != "" {
		fmt.Fprintf(&b, "  Acquire errors the loops retried:%s\n", s)
	}
	t.Log(b.String())
}

// pct is the nearest-rank percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds)+99)/100 - 1
	return ds[max(i, 0)]
}

// inject injects one fault of kind k, restores what it broke and returns
// its window once the first grant after it has come.
func (c *testCluster) inject(w *workload, k faultKind) *window {
	c.t.Helper()
	l := c.waitLeader()
	v, err := c.view(l)
	if err != nil {
		c.t.Fatalf("leader n%d: %v", l, err)
	}
	win := &window{kind: k, leader: l, epoch: v.Epoch}
	switch k {
	case killLeader:
		win.at = time.Now()
		c.kill(l)
		c.waitLeader(l)
		win.ready = time.Since(win.at)
		c.start(l)
	case stopLeader:
		win.at = time.Now()
		c.signal(l, syscall.SIGSTOP)
		c.waitLeader(l)
		win.ready = time.Since(win.at)
		time.Sleep(time.Until(win.at.Add(stopFor)))
		c.signal(l, syscall.SIGCONT)
	case cutRaft:
		win.at = time.Now()
		c.nw.setRaftLink(c.t, l, false)
		c.waitLeader(l)
		win.ready = time.Since(win.at)
		time.Sleep(time.Until(win.at.Add(cutFor)))
		c.nw.setRaftLink(c.t, l, true)
	case killFollower:
		f := l%len(c.nodes) + 1
		win.leader = f
		win.at = time.Now()
		c.kill(f)
		time.Sleep(downFor)
		c.start(f)
	case termLeader:
		win.at = time.Now()
		c.terminate(l)
		win.note = c.node(l).handoverNote()
		c.waitLeader(l)
		c.start(l)
	case killAll:
		win.at = time.Now()
		for _, nd := range c.nodes {
			c.kill(nd.i)
		}
		c.startAll()
	}
	above := win.epoch
	if k == killFollower {
		above-- // the leader stays: any grant after the fault counts
	}
	win.first = c.waitGrant(w, win.at, above)
	win.toFirst = win.first.granted.Sub(win.at)
	win.newLeader = c.leader()
	return win
}

// waitGrant waits for a grant at or after t0 on an epoch above epoch.
func (c *testCluster) waitGrant(w *workload, t0 time.Time, epoch uint64) *hold {
	c.t.Helper()
	var h *hold
	c.eventually(grantWait, func() bool { h = w.firstGrant(t0, epoch); return h != nil },
		"no grant on an epoch above %d since %s; Acquire errors:%s", epoch, t0.Format("15:04:05.000"), errorSummaryOf(w))
	return h
}

// settle waits until one node serves as leader and every node follows it.
func (c *testCluster) settle() {
	c.t.Helper()
	c.eventually(leaderWait, func() bool { l := c.leader(); return l != 0 && c.allFollow(l) },
		"the cluster did not settle (one leader, every node following it)")
}

func (c *testCluster) allFollow(l int) bool {
	id := fmt.Sprintf("n%d", l)
	for _, nd := range c.nodes {
		v, err := c.view(nd.i)
		if err != nil || v.Leader == nil || v.Leader.ID != id {
			return false
		}
	}
	return true
}
