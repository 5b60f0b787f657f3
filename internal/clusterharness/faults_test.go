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
	killThenTerm
	killTwice
	// The membership faults (membership_test.go).
	growTo5
	shrinkTo3
	replaceMember
	wipeFounder
	wipeJoined
	laggingVoter
	addRemoveInGrace
	wipeJoinedLagging
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
		"kill -9, then SIGTERM in the grace",
		"kill -9, then kill -9 in the grace",
		"cluster add of members, to 5 voters",
		"cluster remove of members, to 3 voters",
		"a follower replaced under a new id",
		"a founder's disk wiped, same flags",
		"a joined member's disk wiped, same flags",
		"a voter lagging two handovers behind",
		"kill -9, cluster add and remove in grace",
		"wiped joined member beside a lagging one",
	}[k]
}

// membership reports whether k changes the membership or wipes a disk
// (namespaces only).
func (k faultKind) membership() bool { return k >= growTo5 }

// failover reports whether k is a leader's fault whose failover time the
// 1 s phase holds against its goal.
func (k faultKind) failover() bool {
	return k == killLeader || k == stopLeader || k == cutRaft || k == termLeader || k == killAll
}

// What each fault does to the long holders connected to the node it hits
// (the believers; the Go loops see what the fault does), so that a holder
// goes on believing across the fault and only the grace protects the
// next holder: kill -9 (of the leader, or the first of a compound) is a
// power loss, the holders' links go down with the node (no reset tells
// them); a SIGSTOP tells them nothing by itself; with the Raft link cut,
// their links turn deaf (NOT_LEADER does not reach them); before a
// SIGTERM their links go down (they do not see ERROR SHUTDOWN, do not
// close, and the handover's drain gives up on them).

// Fault durations and windows.
const (
	stopFor  = 3 * time.Second
	cutFor   = 5 * time.Second
	downFor  = time.Second // a killed follower stays down this long
	quietFor = 2 * time.Second
	// grantWait bounds the time from a fault to the first grant after it
	// (a lease bound of 10 s makes it some 11 s, a compound fault more).
	grantWait = 40 * time.Second
	// faultGrantWait is grantWait for a window of the schedule: a new
	// leader that a busy machine stalls past its leader lease steps down
	// and the next one starts the 10 s grace over; two or three of those
	// in a row happened in one long schedule in three, beside other
	// work. The failover time of the 1 s phase is held against its goal
	// on its own (fastFailoverLimit).
	faultGrantWait = 2 * time.Minute
	// lowerLooks is how long killTwice waits between its kills: three of
	// the leader's looks at lowering the lease bound (every 10 s), so that
	// a leader that would lower it inside its grace has done so (it
	// lowers only to the larger of two looks in a row, and its first look
	// may still count a 60 s ACQUIRE it refused as a follower), while a
	// 60 s holder cut off at the first kill believes for 48 s more.
	lowerLooks = 32 * time.Second
	// boundWait bounds the wait for the lease bound to come down after the
	// long holders leave (two looks after the grace, which may be 60 s).
	boundWait = 150 * time.Second
)

// names are the Go loops' locks.
var names = []string{"alpha", "beta", "gamma", "delta", "epsilon"}

// clientLoops is the number of Go client loops on names, longLoops the
// number on longNames (the long holders' locks).
const (
	clientLoops = 24
	longLoops   = 4
)

// longNames are the long holders' locks (see phaseHolders); the
// semaphore, semName, is the shared believers' alone.
var longNames = []string{"long1-a", "long1-b", "long10-a", "long10-b", "long60"}

// phase is a part of the schedule with one set of leases in play: the
// longest sets the lease bound, and so every crash failover's grace.
type phase int

const (
	// phaseFast: 1 s leases only (the Go loops and 1 s believers): the
	// failover times against the 2.5 s goal.
	phaseFast phase = iota
	// phaseGrace: believers with 10 s leases too, holding 5 to 20 s: a
	// failover waits some 10 s, and a holder cut off believes for up to
	// 8 s, so a grace that is too short shows as an overlap.
	phaseGrace
	// phaseLong: believers with 60 s leases too (bound 60 s); one compound
	// fault per visit, as each crash costs a minute.
	phaseLong
)

func (p phase) String() string {
	return [...]string{"1 s leases", "10 s leases too", "60 s leases too"}[p]
}

// The faults of each phase, in order. The membership faults run before
// the others of their phase: the cluster grows to five voters, a founder
// and a joined member lose their disks (each is refused, and replaced
// under a new id), a voter lags two handovers behind, and it shrinks back
// to three; so the faults after them, the full restart among them, hit a
// cluster whose members joined with -join.
var (
	graceFaults  = []faultKind{stopLeader, killLeader, cutRaft, termLeader, killThenTerm, killFollower}
	fastFaults   = []faultKind{killLeader, stopLeader, cutRaft, killFollower, termLeader, killAll}
	longFaults   = []faultKind{killTwice}
	graceMembers = []faultKind{addRemoveInGrace}
	fastMembers  = []faultKind{growTo5, wipeFounder, laggingVoter, wipeJoined, shrinkTo3}
	// The long schedule's other rounds: the faults on five voters, and
	// the reviewer's lagging voter with a wiped joined member.
	graceMembers5 = []faultKind{growTo5}
	fastMembers5  = []faultKind{wipeFounder, laggingVoter, replaceMember, wipeJoined, shrinkTo3}
	graceMembersL = []faultKind{addRemoveInGrace, wipeJoinedLagging}
)

// step is one fault of the schedule, in its phase.
type step struct {
	phase phase
	kind  faultKind
}

// window is one fault and what followed it.
type window struct {
	step
	at        time.Time
	leader    int    // the node hit: the leader, or the follower killed
	epoch     uint64 // the leader's epoch before the fault
	first     *hold  // the first grant after the fault on a later epoch (any epoch for a follower's kill)
	toFirst   time.Duration
	newLeader int // the serving leader once the first grant came (0: none seen)
	// ready is the time from the fault to another node's /readyz saying
	// it leads (epoch committed; its grace may still run); 0 if not taken.
	ready time.Duration
	cut   int // long holders whose links the fault cut or made deaf
	// cutSessions are their sessions, each done when its belief is over.
	cutSessions []*bsession
	note        string // what happened on the way (handover, compound steps)
	// unrefused says how a wiped member failed to refuse (membership
	// faults).
	unrefused []string
}

// longEvery is how often (in rounds) the long schedule visits phaseLong.
const longEvery = 4

// schedule is the list of faults: the short schedule (each fault of the
// grace phase, then each of the fast phase, once, the membership faults
// among them); with BATON_CLUSTER_SCHEDULE=long60 the 60 s phase alone;
// with BATON_CLUSTER_SCHEDULE=long BATON_CLUSTER_ROUNDS rounds (18 by
// default: some 300 faults) of both, with a
// visit to the long phase in the first round and every longEvery rounds.
func schedule(t *testing.T) []step {
	switch os.Getenv("BATON_CLUSTER_SCHEDULE") {
	case "long":
	case "long60": // the 60 s phase alone
		return []step{{phaseLong, killTwice}}
	default:
		return rounds(1, false)
	}
	n := 18
	if s := os.Getenv("BATON_CLUSTER_ROUNDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("BATON_CLUSTER_ROUNDS=%q: want a positive number", s)
		}
	}
	return rounds(n, true)
}

// rounds is n rounds of the grace and fast phases, with the long phase in
// some of them if long. A short round has the membership faults of the
// short schedule; the long schedule's rounds take turns: the short
// round's, then one whose faults all hit five voters, then one with the
// lagging voter beside a wiped joined member.
func rounds(n int, long bool) []step {
	var ss []step
	add := func(p phase, ks ...[]faultKind) {
		for _, k := range ks {
			for _, kind := range k {
				ss = append(ss, step{p, kind})
			}
		}
	}
	for r := range n {
		switch {
		case !long || r%3 == 0:
			add(phaseGrace, graceFaults, graceMembers)
		case r%3 == 1:
			add(phaseGrace, graceMembers5, graceFaults)
		default:
			add(phaseGrace, graceFaults, graceMembersL)
		}
		if long && r%longEvery == 0 {
			add(phaseLong, longFaults)
		}
		switch {
		case !long || r%3 == 0:
			add(phaseFast, fastMembers, fastFaults)
		case r%3 == 1:
			add(phaseFast, fastMembers5, fastFaults)
		default:
			add(phaseFast, fastFaults)
		}
	}
	return ss
}

// TestClusterFaults runs the schedule against three nodes under the
// workload and checks the run. It reports, per phase and fault kind, the
// time from the fault to the first grant on the new leader.
func TestClusterFaults(t *testing.T) {
	needFaults(t)
	r := runSchedule(t, batonBin, nil, schedule(t), nil)
	report(t, r)
	for i, s := range r.verdict.violations() {
		if i == maxListed {
			t.Errorf("(%d more violations)", len(r.verdict.violations())-i)
			break
		}
		t.Error(s)
	}
	if st := r.verdict.semaphores[semName]; st.most < semLimit {
		t.Errorf("semaphore %q: at most %d holders at once in %d shared grants, want %d (its limit): the run never filled it, so it did not test its limit",
			semName, st.most, st.grants, semLimit)
	}
	for _, win := range r.windows {
		for _, u := range win.unrefused {
			t.Errorf("%s: %s", win.kind, u)
		}
		if win.phase == phaseFast && win.kind.failover() && win.toFirst > fastFailoverLimit {
			t.Errorf("%s with 1 s leases only (bound %v): first grant %v after the fault, over %v: the grace must shrink with the bound once longer leases are gone",
				win.kind, time.Second, win.toFirst.Round(time.Millisecond), fastFailoverLimit)
		}
	}
}

// maxListed is how many violations a failed run lists (a holder that
// believes too long overlaps every short hold granted meanwhile).
const maxListed = 20

// fastFailoverLimit bounds a failover with 1 s leases only: twice the
// 2.5 s goal (docs/operations.md), for a loaded 2-core machine; the goal
// itself is read from the report's p99. A failover that waits out a grace
// of longer leases that have gone shows as some 11 s.
const fastFailoverLimit = 5 * time.Second

// runResult is what runSchedule saw.
type runResult struct {
	windows []*window
	verdict verdict
	w       *workload
}

// runSchedule runs steps against three nodes of bin with env under the
// workload. With until set it stops after the first window after which
// until holds for the checker's verdict so far (the mutation gate).
func runSchedule(t *testing.T, bin string, env []string, steps []step, until func(verdict) bool) runResult {
	t.Helper()
	nw := newNetwork(t, memberSlots)
	if !nw.netns {
		var kept []step
		for _, st := range steps {
			if !st.kind.membership() {
				kept = append(kept, st)
			}
		}
		t.Logf("NETWORK: loopback: the %d membership faults are left out (they need addresses every node reaches alike)", len(steps)-len(kept))
		steps = kept
	}
	c := newCluster(t, nw, bin, env, 3)
	c.startAll()
	c.settle()
	w := newWorkload()
	t.Cleanup(func() { w.stop() })
	addrs := c.clientAddrs()
	w.loops(t, clientLoops, 0, addrs, names)
	// Go loops on the long holders' names too: a Go client waiting on a
	// paused leader moves on to the new one after 0.8 × its lease, so the
	// new leader has a waiter to grant while the paused leader's holder
	// still believes.
	w.loops(t, longLoops, clientLoops, addrs, longNames)
	// And one that waits for "long60" alone, so that a leader that grants
	// it too early has a taker (its only believer is the one cut off).
	w.loops(t, 1, clientLoops+longLoops, addrs, []string{"long60"})
	// Long holders with 1 s leases are there throughout; the others
	// come and go with their phase.
	groups := []*believerGroup{w.believers(addrs, phaseHolders[phaseFast]...)}
	c.waitGrant(w, time.Now(), 0)

	var windows []*window
	cur := phaseFast
	for _, st := range steps {
		if st.phase != cur {
			groups = c.enterPhase(w, addrs, groups, cur, st.phase)
			cur = st.phase
		}
		win := c.inject(w, groups, st)
		windows = append(windows, win)
		t.Logf("fault %-40s [%s] on slot %d (epoch %d, %d long holders cut, %d voters): first grant %v later, epoch %d, leader now slot %d%s",
			st.kind, st.phase, win.leader, win.epoch, win.cut, len(c.members()), win.toFirst.Round(time.Millisecond), win.first.token>>40, win.newLeader, win.noteText())
		if until != nil {
			if v := check(w.snapshot()); until(v) {
				// Let the holders the fault cut off believe to their
				// end, so that the overlaps are reported whole.
				for _, s := range win.cutSessions {
					select {
					case <-s.done:
					case <-time.After(2 * time.Minute):
					}
				}
				break
			}
		}
		c.settle()
		c.waitGrant(w, time.Now(), 0)
		time.Sleep(quietFor) // the quiet window: the workload runs with no fault
	}
	return runResult{windows: windows, verdict: check(w.stop()), w: w}
}

// phaseHolders are the long holders each phase adds (those of the fast
// phase are there throughout).
//
// The semaphore: four shared believers with 1 s leases throughout and
// three with 10 s leases in the 10 s phase, on semLimit slots. So the name
// is full most of the time (the waiters move on within a second of a
// fault, to the next leader), and in the 10 s phase a fault usually finds
// a 10 s holder in it that goes on believing; none with a 60 s lease, for
// the reason below.
//
// One 60 s holder, not two: a second one waiting at the new leader after
// the first kill would keep the bound up there, and killTwice would not
// see a leader that lowers the bound inside its grace (the Go loops wait
// for "long60" with 1 s leases).
var phaseHolders = map[phase][]believerSpec{
	phaseFast: {
		{names: []string{"long1-a", "long1-b"}, perName: 2, lease: time.Second, holdMin: 2 * time.Second, holdMax: 8 * time.Second, firstID: 0},
		{names: []string{semName}, perName: 4, lease: time.Second, holdMin: 2 * time.Second, holdMax: 8 * time.Second, firstID: 10, limit: semLimit},
	},
	phaseGrace: {
		{names: []string{"long10-a", "long10-b"}, perName: 2, lease: 10 * time.Second, holdMin: 5 * time.Second, holdMax: 20 * time.Second, firstID: 100},
		{names: []string{semName}, perName: 3, lease: 10 * time.Second, holdMin: 5 * time.Second, holdMax: 20 * time.Second, firstID: 110, limit: semLimit},
	},
	phaseLong: {
		{names: []string{"long60"}, perName: 1, lease: time.Minute, holdMin: 20 * time.Second, holdMax: 40 * time.Second, firstID: 200},
	},
}

// enterPhase moves the workload from phase from to phase to: the long
// holders of the phases left leave (and the lease bound must come down
// before faults are timed against it), those of the phases entered start,
// and every group holds before the next fault. It returns the groups now
// running (the first, the 1 s holders, stays throughout).
func (c *testCluster) enterPhase(w *workload, addrs []string, groups []*believerGroup, from, to phase) []*believerGroup {
	c.t.Helper()
	for p := from; p > to; p-- {
		g := groups[len(groups)-1]
		g.stop()
		groups = groups[:len(groups)-1]
	}
	if to < from {
		c.waitBound(map[phase]time.Duration{phaseFast: time.Second, phaseGrace: 10 * time.Second}[to])
	}
	for p := from + 1; p <= to; p++ {
		groups = append(groups, w.believers(addrs, phaseHolders[p]...))
	}
	c.waitLongHolders(groups)
	return groups
}

func (win *window) noteText() string {
	var parts []string
	if win.ready > 0 {
		parts = append(parts, fmt.Sprintf("another node ready as leader after %v", win.ready.Round(time.Millisecond)))
	}
	if win.note != "" {
		parts = append(parts, win.note)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// report logs the run's counts and, per phase and fault kind, the
// fault-to-first-grant times (p50, p99, max over its windows).
func report(t *testing.T, r runResult) {
	t.Helper()
	type key struct {
		p phase
		k faultKind
	}
	byKind := map[key][]time.Duration{}
	readyBy := map[key][]time.Duration{}
	var fastCrash []time.Duration
	for _, win := range r.windows {
		k := key{win.phase, win.kind}
		byKind[k] = append(byKind[k], win.toFirst)
		if win.ready > 0 {
			readyBy[k] = append(readyBy[k], win.ready)
		}
		if win.phase == phaseFast && win.kind.failover() {
			fastCrash = append(fastCrash, win.toFirst)
		}
	}
	v := r.verdict
	var b strings.Builder
	fmt.Fprintf(&b, "RESULT: %d faults, %d grants checked, %d overlaps, %d semaphore crowds, %d other violations\n",
		len(r.windows), v.holds, len(v.overlaps), len(v.crowds), len(v.bad))
	b.WriteString(v.semSummary())
	fmt.Fprintf(&b, "  %-40s %-16s %3s %9s %9s %9s   %s\n", "fault to first grant on the new leader", "phase", "n", "p50", "p99", "max",
		"another node ready as leader: p50, p99")
	for p := range phaseLong + 1 {
		for k := range numKinds {
			ds := byKind[key{p, k}]
			if len(ds) == 0 {
				continue
			}
			slices.Sort(ds)
			fmt.Fprintf(&b, "  %-40s %-16s %3d %9v %9v %9v", k, p, len(ds), pct(ds, 50).Round(time.Millisecond),
				pct(ds, 99).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
			if rs := readyBy[key{p, k}]; len(rs) > 0 {
				slices.Sort(rs)
				fmt.Fprintf(&b, "   %v, %v", pct(rs, 50).Round(time.Millisecond), pct(rs, 99).Round(time.Millisecond))
			}
			b.WriteString("\n")
		}
	}
	if len(fastCrash) > 0 {
		slices.Sort(fastCrash)
		fmt.Fprintf(&b, "  failover with 1 s leases (every leader fault of that phase): n %d, p50 %v, p99 %v, max %v\n", len(fastCrash),
			pct(fastCrash, 50).Round(time.Millisecond), pct(fastCrash, 99).Round(time.Millisecond), fastCrash[len(fastCrash)-1].Round(time.Millisecond))
	}
	if s := r.w.errorSummary(); s != "" {
		fmt.Fprintf(&b, "  Acquire errors the loops retried:%s\n", s)
	}
	t.Log(b.String())
}

// pct is the nearest-rank percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds)+99)/100 - 1
	return ds[max(i, 0)]
}

// cutHolders sets the links of the long holders on node i to l and
// returns how many it changed; their sessions are added to win's. Each
// first sends a heartbeat and has it confirmed, so that it goes on
// believing for a whole 0.8 × lease after the fault: a 60 s holder
// heartbeats every 15 s, and would otherwise believe for 33 to 48 s.
func (win *window) cutHolders(groups []*believerGroup, i int, l linkState) int {
	var ss []*bsession
	for _, g := range groups {
		ss = append(ss, g.holdingOn(i)...)
	}
	before := make([]uint64, len(ss))
	for i, s := range ss {
		before[i] = s.replies.Load()
		s.beat()
	}
	for deadline := time.Now().Add(confirmWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		confirmed := 0
		for i, s := range ss {
			if s.replies.Load() > before[i] {
				confirmed++
			}
		}
		if confirmed == len(ss) {
			break
		}
	}
	for _, s := range ss {
		s.setLink(l)
	}
	win.cutSessions = append(win.cutSessions, ss...)
	return len(ss)
}

// confirmWait bounds the wait for those confirmations (a round trip on a
// loaded machine); past it the fault goes ahead.
const confirmWait = time.Second

// inject injects one fault, restores what it broke and returns its window
// once the first grant after it has come.
func (c *testCluster) inject(w *workload, groups []*believerGroup, st step) *window {
	c.t.Helper()
	l := c.waitLeader()
	v, err := c.view(l)
	if err != nil {
		c.t.Fatalf("leader n%d: %v", l, err)
	}
	win := &window{step: st, leader: l, epoch: v.Epoch}
	switch st.kind {
	case killLeader:
		win.cut = win.cutHolders(groups, l, linkCut)
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
		win.cut = win.cutHolders(groups, l, linkDeaf)
		win.at = time.Now()
		c.nw.setRaftLink(c.t, l, false)
		c.waitLeader(l)
		win.ready = time.Since(win.at)
		time.Sleep(time.Until(win.at.Add(cutFor)))
		c.nw.setRaftLink(c.t, l, true)
	case killFollower:
		f := c.follower(nil, l)
		win.leader = f
		win.at = time.Now()
		c.kill(f)
		time.Sleep(downFor)
		c.start(f)
	case termLeader:
		win.cut = win.cutHolders(groups, l, linkCut)
		win.at = time.Now()
		c.terminate(l)
		win.note = c.node(l).handoverNote()
		c.waitLeader(l)
		c.start(l)
	case killAll:
		win.at = time.Now()
		for _, nd := range c.members() {
			c.kill(nd.i)
		}
		c.startAll()
	case killThenTerm:
		win.cut = win.cutHolders(groups, l, linkCut)
		win.at = time.Now()
		c.kill(l)
		l2 := c.waitLeader(l)
		win.ready = time.Since(win.at)
		c.start(l)
		c.waitFollows(l, l2) // the handover needs a quorum without l2
		g, err := c.view(l2)
		if err != nil {
			c.t.Fatalf("n%d: %v", l2, err)
		}
		termAt := time.Now()
		c.terminate(l2)
		win.note = fmt.Sprintf("n%d took over, SIGTERM %v after the kill with %v of its grace left: %s", l2,
			termAt.Sub(win.at).Round(time.Millisecond), time.Duration(g.GraceRemainingMs)*time.Millisecond, c.node(l2).handoverNote())
		c.waitLeader(l2)
		c.start(l2)
	case killTwice:
		win.cut = win.cutHolders(groups, l, linkCut)
		win.at = time.Now()
		c.kill(l)
		l2 := c.waitLeader(l)
		win.ready = time.Since(win.at)
		c.start(l)
		c.waitFollows(l, l2)
		time.Sleep(time.Until(win.at.Add(lowerLooks)))
		g, err := c.view(l2)
		if err != nil {
			c.t.Fatalf("n%d: %v", l2, err)
		}
		win.cut += win.cutHolders(groups, l2, linkCut)
		killAt := time.Now()
		c.kill(l2)
		win.note = fmt.Sprintf("n%d took over, killed %v after the first kill with %v of its grace left and a lease bound of %v", l2,
			killAt.Sub(win.at).Round(time.Millisecond), time.Duration(g.GraceRemainingMs)*time.Millisecond, time.Duration(g.LeaseBoundMs)*time.Millisecond)
		c.waitLeader(l2)
		c.start(l2)
	default:
		c.injectMembership(w, groups, st, win)
	}
	above := win.epoch
	switch st.kind {
	case killFollower, growTo5, shrinkTo3, replaceMember, wipeFounder, wipeJoined:
		above-- // the leader stays: any grant after the fault counts
	}
	wait := faultGrantWait
	if st.phase == phaseLong {
		wait = 3 * time.Minute
	}
	win.first = c.waitGrantWithin(w, win.at, above, wait)
	win.toFirst = win.first.granted.Sub(win.at)
	win.newLeader = c.leader()
	return win
}

// waitGrant waits for a grant at or after t0 on an epoch above epoch.
func (c *testCluster) waitGrant(w *workload, t0 time.Time, epoch uint64) *hold {
	c.t.Helper()
	return c.waitGrantWithin(w, t0, epoch, grantWait)
}

func (c *testCluster) waitGrantWithin(w *workload, t0 time.Time, epoch uint64, within time.Duration) *hold {
	c.t.Helper()
	var h *hold
	c.eventually(within, func() bool { h = w.firstGrant(t0, epoch); return h != nil },
		"no grant on an epoch above %d since %s (%s); Acquire errors:%s", epoch, t0.Format("15:04:05.000"),
		lazyString(c.leaderState), errorSummaryOf(w))
	return h
}

// leaderState says what the serving leader reports of its grace, for a
// failure message.
func (c *testCluster) leaderState() string {
	l := c.leader()
	if l == 0 {
		return "no serving leader"
	}
	v, err := c.view(l)
	if err != nil {
		return fmt.Sprintf("leader n%d: %v", l, err)
	}
	return fmt.Sprintf("leader n%d, epoch %d: lease bound %v, grace left %v", l, v.Epoch,
		time.Duration(v.LeaseBoundMs)*time.Millisecond, time.Duration(v.GraceRemainingMs)*time.Millisecond)
}

// waitBound waits until the leader's committed lease bound is at most b.
func (c *testCluster) waitBound(b time.Duration) {
	c.t.Helper()
	c.eventually(boundWait, func() bool {
		l := c.leader()
		if l == 0 {
			return false
		}
		v, err := c.view(l)
		return err == nil && time.Duration(v.LeaseBoundMs)*time.Millisecond <= b
	}, "the lease bound did not come down to %v", b)
}

// waitLongHolders waits until each name of each group is held by a
// believer of that group, so that the next fault finds long holders of
// every kind to hit.
func (c *testCluster) waitLongHolders(groups []*believerGroup) {
	c.t.Helper()
	c.eventually(grantWait, func() bool {
		for _, g := range groups {
			for _, n := range g.names() {
				if !g.holds(n) {
					return false
				}
			}
		}
		return true
	}, "the long holders did not all take their locks")
}

// settle waits until one node serves as leader and every node follows it.
func (c *testCluster) settle() {
	c.t.Helper()
	c.eventually(leaderWait, func() bool { l := c.leader(); return l != 0 && c.allFollow(l) },
		"the cluster did not settle (one leader, every node following it)")
}

func (c *testCluster) allFollow(l int) bool {
	id := c.node(l).id
	for _, nd := range c.nodes {
		if nd.id == "" {
			continue
		}
		v, err := c.view(nd.i)
		if err != nil || v.Leader == nil || v.Leader.ID != id {
			return false
		}
	}
	return true
}
