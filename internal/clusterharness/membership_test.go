package clusterharness

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Membership faults: `baton cluster add` and `remove` under load and
// inside a new leader's grace, members replaced under new ids, disks
// wiped and nodes restarted with the flags they always had (a founder's
// -peers, a joined member's -join and -peers: each must refuse to take
// part, and the cluster must keep serving), a voter left behind while
// leadership moves on, and the cluster grown to five voters and shrunk
// back. They need real addresses that every node reaches the same way, so
// they run on the network namespaces only: on the loopback fallback each
// node reaches the others through proxies of its own, and a configuration
// that Raft spreads from one node would give every node the leader's
// proxies.

// memberSlots is the number of slots of a schedule's network: three
// founders, and room for five voters plus one being added before another
// is removed.
const memberSlots = 6

// refuseWait bounds the wait for a wiped member to refuse: it asks the
// members at once, and one that knows answers at once.
const refuseWait = 15 * time.Second

// members is the slots that hold a member, in slot order.
func (c *testCluster) members() []*node {
	var ms []*node
	for _, nd := range c.nodes {
		if nd.id != "" {
			ms = append(ms, nd)
		}
	}
	return ms
}

// follower is an up member other than the nodes in not, the first for
// which pick holds (nil pick: any); 0 if none.
func (c *testCluster) follower(pick func(*node) bool, not ...int) int {
	for _, nd := range c.members() {
		if nd.up && !slices.Contains(not, nd.i) && (pick == nil || pick(nd)) {
			return nd.i
		}
	}
	return 0
}

func founder(nd *node) bool { return !nd.join }
func joined(nd *node) bool  { return nd.join }

// peersFlag is the -peers of a node added now: the current members, as
// the docs give them to `baton serve -join`.
func (c *testCluster) peersFlag() string {
	var ps []string
	for _, nd := range c.members() {
		ps = append(ps, nd.id+"="+c.nw.raftAddr(nd.i))
	}
	return strings.Join(ps, ",")
}

// opsAddrs is the ops address of every up member but those in not, the
// serving leader's first, for the CLI to try in order (it sends an
// action on only when a node cannot be reached: a node waiting to be
// added answers, with 503).
func (c *testCluster) opsAddrs(not ...int) string {
	l := c.leader(not...)
	var as []string
	for _, nd := range c.members() {
		if nd.up && !slices.Contains(not, nd.i) {
			if nd.i == l {
				as = append([]string{c.nw.opsAddr(nd.i)}, as...)
			} else {
				as = append(as, c.nw.opsAddr(nd.i))
			}
		}
	}
	return strings.Join(as, ",")
}

// cli runs `baton cluster args...` against the up members but those in
// not, as an operator would, until no answer says that no leader is known
// (an election under way).
func (c *testCluster) cli(not []int, args ...string) string {
	c.t.Helper()
	deadline := time.Now().Add(leaderWait)
	for {
		argv := append(append([]string{"cluster"}, args...), "-ops-addr", c.opsAddrs(not...), "-admin-token-file", c.tokenFile)
		out, err := exec.Command(c.bin, argv...).CombinedOutput()
		if err == nil {
			return strings.TrimSpace(string(out))
		}
		if time.Now().After(deadline) || !strings.Contains(string(out), "no leader") && !strings.Contains(string(out), "not the leader") {
			c.t.Fatalf("baton %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// join starts a new member in vacant slot i (a new id, -join, the current
// members as -peers, an empty data directory), adds it with `baton
// cluster add`, and waits until the leader has recorded it as holding the
// log. It returns the new id.
func (c *testCluster) join(i int) string {
	c.t.Helper()
	nd := c.node(i)
	if nd.id != "" {
		c.t.Fatalf("slot %d is %s's, not vacant", i, nd.id)
	}
	nd.id, nd.join, nd.peers = fmt.Sprintf("n%d", c.nextID), true, c.peersFlag()
	c.nextID++
	nd.dir = filepath.Join(c.t.TempDir(), nd.id)
	c.start(i)
	c.cli([]int{i}, "add", nd.id, c.nw.raftAddr(i))
	c.eventually(leaderWait, func() bool { return c.recordedJoined(nd.id) }, "%s is not recorded as holding the log", nd.id)
	return nd.id
}

// recordedJoined reports whether a leader logged id among the members
// that hold the log.
func (c *testCluster) recordedJoined(id string) bool {
	for _, nd := range c.nodes {
		for _, l := range strings.Split(nd.log.String(), "\n") {
			if !strings.Contains(l, "members recorded as holding the log") {
				continue
			}
			var e struct{ Joined string }
			if json.Unmarshal([]byte(l), &e) == nil && slices.Contains(strings.Split(e.Joined, ","), id) {
				return true
			}
		}
	}
	return false
}

// remove takes the member of slot i out with `baton cluster remove`,
// stops its process, and leaves the slot vacant.
func (c *testCluster) remove(i int) string {
	c.t.Helper()
	nd := c.node(i)
	id := nd.id
	c.cli([]int{i}, "remove", id)
	if nd.up {
		c.kill(i)
	}
	nd.id, nd.join, nd.peers, nd.dir = "", false, "", ""
	return id
}

// slotOf is the slot of member id.
func (c *testCluster) slotOf(id string) int {
	for _, nd := range c.nodes {
		if nd.id == id {
			return nd.i
		}
	}
	return 0
}

// freeSlot is a vacant slot.
func (c *testCluster) freeSlot() int {
	for _, nd := range c.nodes {
		if nd.id == "" {
			return nd.i
		}
	}
	c.t.Fatalf("no vacant slot among %d", len(c.nodes))
	return 0
}

// wipe empties slot i's data directory, as a new disk would (the node
// must not be running).
func (c *testCluster) wipe(i int) {
	c.t.Helper()
	nd := c.node(i)
	if err := os.RemoveAll(nd.dir); err != nil {
		c.t.Fatal(err)
	}
	if err := os.MkdirAll(nd.dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
}

// startMayRefuse starts slot i's node, which may exit before it serves
// (a wiped member refused at once).
func (c *testCluster) startMayRefuse(i int) {
	c.t.Helper()
	nd := c.node(i)
	if err := <-c.launch(nd); err != nil {
		select {
		case <-nd.p.Exited:
		default:
			c.t.Fatal(err)
		}
	}
}

// exited reports whether slot i's process ends within d.
func (c *testCluster) exited(i int, d time.Duration) bool {
	select {
	case <-c.node(i).p.Exited:
		return true
	case <-time.After(d):
		return false
	}
}

// refused waits up to within for the node of slot i, started on a wiped
// disk, to exit 1 saying that it held the log; "" if it did, else what
// it did instead (it is then killed: it must not stay).
func (c *testCluster) refused(i int, within time.Duration) string {
	c.t.Helper()
	nd := c.node(i)
	select {
	case <-nd.p.Exited:
		nd.up = false
		log := nd.log.String()
		if k := strings.LastIndex(log, "--- start"); k >= 0 {
			log = log[k:]
		}
		if nd.p.Code != 1 || !strings.Contains(log, "held the log") {
			return fmt.Sprintf("%s exited %d without saying that it held the log", nd.id, nd.p.Code)
		}
		return ""
	case <-time.After(within):
		c.kill(i)
		return fmt.Sprintf("%s, wiped, ran %v under its id with its usual flags: not refused", nd.id, within)
	}
}

// wipeRestart kills the member of slot i, wipes its disk and starts it
// again with its usual flags; it must refuse. It returns what went
// wrong, "" if nothing.
func (c *testCluster) wipeRestart(i int) string {
	c.t.Helper()
	c.kill(i)
	c.wipe(i)
	c.startMayRefuse(i)
	return c.refused(i, refuseWait)
}

// replace removes the member of slot i (up or not) and adds a new id in
// its slot: the docs' way back for a member that lost its disk.
func (c *testCluster) replace(i int) (old, new string) {
	c.t.Helper()
	old = c.remove(i)
	return old, c.join(i)
}

// injectMembership is inject for the membership faults: it fills win.
func (c *testCluster) injectMembership(w *workload, groups []*believerGroup, st step, win *window) {
	c.t.Helper()
	l := win.leader
	var notes []string
	note := func(f string, args ...any) { notes = append(notes, fmt.Sprintf(f, args...)) }
	defer func() { win.note = strings.Join(notes, "; ") }()
	switch st.kind {
	case growTo5:
		win.at = time.Now()
		for len(c.members()) < 5 {
			note("added %s", c.join(c.freeSlot()))
		}
	case shrinkTo3:
		win.at = time.Now()
		for len(c.members()) > 3 {
			f := c.follower(joined, l)
			if f == 0 {
				f = c.follower(nil, l)
			}
			note("removed %s", c.remove(f))
		}
	case replaceMember:
		// A joined member: founders are few, and a wipe needs one.
		f := c.follower(joined, l)
		if f == 0 {
			f = c.follower(nil, l)
		}
		win.at = time.Now()
		old, new := c.replace(f)
		note("%s replaced by %s", old, new)
	case wipeFounder, wipeJoined:
		pick := founder
		if st.kind == wipeJoined {
			pick = joined
		}
		f := c.follower(pick, l)
		if f == 0 && st.kind == wipeFounder {
			// Every founder wiped before has been replaced by a joined
			// member: a long schedule runs out of them.
			note("no founder left: a joined member instead")
			f = c.follower(joined, l)
		}
		if f == 0 && st.kind == wipeJoined {
			// None yet: replace a follower, whose successor joined.
			old, new := c.replace(c.follower(nil, l))
			note("%s replaced by %s first", old, new)
			f = c.follower(joined, l)
		}
		if f == 0 {
			note("no such follower: nothing wiped")
			win.at = time.Now()
			break
		}
		id := c.node(f).id
		c.eventually(leaderWait, func() bool { return c.recordedJoined(id) }, "%s is not recorded as holding the log", id)
		win.leader = f
		win.at = time.Now()
		if bad := c.wipeRestart(f); bad != "" {
			win.unrefused = append(win.unrefused, bad)
		} else {
			note("%s refused on its wiped disk", id)
		}
		// The cluster keeps serving meanwhile; the way back.
		old, new := c.replace(f)
		note("%s replaced by %s", old, new)
	case laggingVoter:
		f := c.follower(nil, l)
		win.leader = f
		win.at = time.Now()
		c.kill(f)
		for range 2 { // leadership moves on twice while f is down
			cur := c.waitLeader(f)
			c.terminate(cur)
			c.start(cur)
			note("%s handed over", c.node(cur).id)
		}
		c.waitLeader(f)
		c.start(f)
		note("%s back after two handovers", c.node(f).id)
	case addRemoveInGrace:
		win.cut = win.cutHolders(groups, l, linkCut)
		win.at = time.Now()
		c.kill(l)
		l2 := c.waitLeader(l)
		win.ready = time.Since(win.at)
		g, _ := c.view(l2)
		added := c.join(c.freeSlot())
		g2, _ := c.view(l2)
		// A joined follower goes (founders are few); the dead leader
		// comes back.
		f := c.follower(func(nd *node) bool { return nd.join && nd.id != added }, l, l2)
		if f == 0 {
			f = c.follower(nil, l, l2, c.slotOf(added))
		}
		removed := c.remove(f)
		c.start(l)
		note("%s took over with %v of grace; %s added, then %s removed with %v of it left; %s back", c.node(l2).id,
			time.Duration(g.GraceRemainingMs)*time.Millisecond, added, removed, time.Duration(g2.GraceRemainingMs)*time.Millisecond, c.node(l).id)
	case wipeJoinedLagging:
		c.lagAndWipe(w, win, note)
	}
}

// lagAndWipe is the reviewer's scenario (cluster/rejoin_test.go runs it
// over one process): voters L, a lagging F and J, added with -join. F
// stops; three handovers move the leadership between L and J; all stop;
// J's disk is wiped and J starts again with its usual flags beside F. J
// must refuse (with F's word, or L's once L is back): else, with an empty
// log and configuration, it votes F into leadership under an epoch below
// the ones committed, and F's tokens go back below those granted at the
// top epoch (the step waits for one). Then L comes back and J is replaced
// under a new id.
func (c *testCluster) lagAndWipe(w *workload, win *window, note func(string, ...any)) {
	c.t.Helper()
	if len(c.members()) != 3 {
		c.t.Fatalf("the lagging-voter wipe needs three members, not %d", len(c.members()))
	}
	j := c.follower(joined)
	if j == 0 {
		old, new := c.replace(c.follower(nil, win.leader))
		note("%s replaced by %s first", old, new)
		j = c.follower(joined)
	}
	f := c.follower(nil, j)
	for _, nd := range c.members() {
		c.eventually(leaderWait, func() bool { return c.recordedJoined(nd.id) }, "%s is not recorded as holding the log", nd.id)
	}
	var l int
	for _, nd := range c.members() {
		if nd.i != j && nd.i != f {
			l = nd.i
		}
	}
	win.leader = j
	win.at = time.Now()
	c.kill(f)
	for range 3 {
		cur := c.waitLeader(f)
		c.terminate(cur)
		c.start(cur)
	}
	top := c.waitLeader(f)
	v, err := c.view(top)
	if err != nil {
		c.t.Fatalf("%s: %v", c.node(top).id, err)
	}
	// Tokens of the top epoch handed out, which F's must never fall below.
	c.waitGrant(w, time.Now(), v.Epoch-1)
	c.kill(l)
	c.kill(j)
	c.wipe(j)
	c.start(f)
	c.startMayRefuse(j)
	note("%s lagged; %s and %s moved to epoch %d (bound %v); %s wiped and started beside %s",
		c.node(f).id, c.node(l).id, c.node(j).id, v.Epoch, time.Duration(v.LeaseBoundMs)*time.Millisecond, c.node(j).id, c.node(f).id)
	// F may know that J held the log (J is refused at once), or not (J
	// must wait, voting for nobody, until L, which knows, is back).
	early := c.exited(j, 5*time.Second)
	c.start(l)
	if bad := c.refused(j, refuseWait); bad != "" {
		win.unrefused = append(win.unrefused, bad)
	} else {
		note("%s refused (beside %s alone: %v)", c.node(j).id, c.node(f).id, early)
	}
	old, new := c.replace(j)
	note("%s replaced by %s", old, new)
}
