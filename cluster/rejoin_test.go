package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/batonlock/baton/internal/batontest"
)

// diskCluster runs nodes on real loopback TCP with real data directories:
// what a node keeps on disk, and what it asks its peers, is the point.
type diskCluster struct {
	t     *testing.T
	base  string // every data directory is in it
	nodes map[string]*Node
	addrs map[string]string
	dirs  map[string]string
}

func newDiskCluster(t *testing.T) *diskCluster {
	// The directories first, so that they are removed after the nodes stop.
	c := &diskCluster{t: t, base: t.TempDir(), nodes: map[string]*Node{}, addrs: map[string]string{}, dirs: map[string]string{}}
	t.Cleanup(func() {
		for id := range c.nodes {
			c.stop(id)
		}
	})
	return c
}

// place gives id a Raft address and a data directory (kept across its
// restarts).
func (c *diskCluster) place(ids ...string) {
	for i, a := range loopbackAddrs(c.t, len(ids)) {
		dir, err := os.MkdirTemp(c.base, ids[i])
		if err != nil {
			c.t.Fatal(err)
		}
		c.addrs[ids[i]], c.dirs[ids[i]] = a, dir
	}
}

func (c *diskCluster) peers(ids ...string) []Peer {
	var ps []Peer
	for _, id := range ids {
		ps = append(ps, Peer{ID: id, RaftAddr: c.addrs[id]})
	}
	return ps
}

// diskConfig is testConfig with timers of a second: these scenarios
// count epochs and hand the leadership over, and a loaded machine's
// stall must not end a term on the way.
func diskConfig(id string) Config {
	cfg := testConfig(id)
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	return cfg
}

// open starts id with the flags a unit file would give it: peers, and
// join for a node added later.
func (c *diskCluster) open(id string, peers []Peer, join bool) *Node {
	c.t.Helper()
	cfg := diskConfig(id)
	cfg.RaftAddr, cfg.DataDir, cfg.Peers, cfg.Join = c.addrs[id], c.dirs[id], peers, join
	cfg.Addr, cfg.OpsAddr = "127.0.0.1:1", "127.0.0.1:2"
	n, err := Open(context.Background(), cfg)
	if err != nil {
		c.t.Fatalf("open %s: %v", id, err)
	}
	n.Start(&nullServer{})
	c.nodes[id] = n
	return n
}

func (c *diskCluster) stop(id string) {
	if n := c.nodes[id]; n != nil {
		n.Close()
		delete(c.nodes, id)
	}
}

// wipe replaces id's data directory with an empty one (a new disk).
func (c *diskCluster) wipe(id string) {
	c.t.Helper()
	if err := os.RemoveAll(c.dirs[id]); err != nil {
		c.t.Fatal(err)
	}
	if err := os.MkdirAll(c.dirs[id], 0o700); err != nil {
		c.t.Fatal(err)
	}
}

// leading waits for a node that serves as leader.
func (c *diskCluster) leading() (string, *Node) {
	c.t.Helper()
	var id string
	batontest.Eventually(c.t, settle, func() bool {
		for i, n := range c.nodes {
			if n.Leading() {
				id = i
				return true
			}
		}
		return false
	}, "no serving leader among %d nodes", len(c.nodes))
	return id, c.nodes[id]
}

// handover moves the leadership from the serving leader to another node.
func (c *diskCluster) handover() {
	c.t.Helper()
	from, l := c.leading()
	if err := l.Handover(); err != nil {
		c.t.Fatalf("handover from %s: %v", from, err)
	}
	batontest.Eventually(c.t, settle, func() bool {
		for id, n := range c.nodes {
			if id != from && n.Leading() {
				return true
			}
		}
		return false
	}, "no other leader after %s handed over", from)
}

// TestWipedJoinedMemberRefused is the reviewer's scenario over real
// transport and data directories. Voters: the leader, a founder that lags
// behind, and n4, added with -join in place of a removed founder. The
// lagging founder stops; three handovers move the leadership between the
// leader and n4; a 30 s lease bound is committed; both stop. n4's data
// directory is wiped (a new disk) and n4 starts again with its usual
// -join flags beside the lagging founder. n4 must refuse to take part,
// saying how to come back: with its empty log and configuration it would
// vote the lagging founder into leadership, whose epoch is below the ones
// committed (fencing tokens go back) and whose grace is two leader leases
// although a 30 s bound was committed. Once the leader is back the
// cluster serves again, with a higher epoch and the whole grace; and the
// docs' way back (remove n4, add a new id with -join and an empty data
// directory) works.
func TestWipedJoinedMemberRefused(t *testing.T) {
	const bound = 30 * time.Second
	c := newDiskCluster(t)
	c.place("n1", "n2", "n3", "n4")
	founders := c.peers("n1", "n2", "n3")
	for _, p := range founders {
		c.open(p.ID, founders, false)
	}
	lid, l := c.leading()
	batontest.Eventually(t, settle, func() bool { return len(l.fsm.get().Joined) == 3 }, "founders not recorded as holding the log: %v", l.fsm.get().Joined)
	var lag, removed string
	for _, p := range founders {
		switch {
		case p.ID == lid:
		case removed == "":
			removed = p.ID
		default:
			lag = p.ID
		}
	}
	c.stop(removed)
	if err := l.RemoveMember(removed); err != nil {
		t.Fatalf("remove %s: %v", removed, err)
	}
	joinFlags := c.peers(lid, lag) // the current members, as the docs give them
	c.open("n4", joinFlags, true)
	if err := l.AddMember("n4", c.addrs["n4"]); err != nil {
		t.Fatalf("add n4: %v", err)
	}
	batontest.Eventually(t, settle, func() bool { return slices.Contains(l.fsm.get().Joined, "n4") }, "n4 not recorded as holding the log")
	batontest.Eventually(t, settle, func() bool { return len(c.nodes[lag].View().Members) == 3 && c.nodes[lag].isMember("n4") },
		"the lagging founder %s does not know n4 as a member", lag)

	c.stop(lag)
	for range 3 {
		c.handover()
	}
	_, l = c.leading()
	if err := l.NoteLease(bound); err != nil {
		t.Fatalf("commit a %v bound: %v", bound, err)
	}
	high := l.fsm.get().Epoch
	t.Logf("%s lags; epochs up to %d and a %v bound committed by %s and n4", lag, high, bound, lid)
	c.stop(lid)
	c.stop("n4")

	c.wipe("n4")
	c.open(lag, founders, false) // a founder restarts with its founding flags
	n4 := c.open("n4", joinFlags, true)
	// The lagging founder may know from its disk that n4 held the log
	// (then n4 is refused at once), or not (then n4 must wait, and vote
	// for nobody).
	refused := func(within time.Duration) bool {
		t.Helper()
		select {
		case err := <-n4.Failed():
			if !errors.Is(err, ErrLostData) {
				t.Fatalf("wiped n4 failed otherwise: %v", err)
			}
			t.Logf("wiped n4 refused: %v", err)
			return true
		case <-time.After(within):
			return false
		}
	}
	early := refused(3 * time.Second)
	if st := c.nodes[lag].fsm.get(); c.nodes[lag].Leading() || n4.r() != nil {
		t.Fatalf("wiped n4 runs Raft (%v) beside the lagging founder %s: leading %v, epoch %d after %d was committed, grace %v with a %v bound committed",
			n4.r() != nil, lag, c.nodes[lag].Leading(), st.Epoch, high, st.Inherited, bound)
	}
	c.open(lid, founders, false)
	if !early && !refused(settle) {
		t.Fatalf("wiped n4 was not refused once %s, which recorded it as holding the log, was back", lid)
	}
	delete(c.nodes, "n4")
	n4.Close()
	_, l = c.leading()
	if st := l.fsm.get(); st.Epoch <= high || st.Inherited < bound {
		t.Fatalf("leader after the refusal: epoch %d (want above %d), grace %v (want at least the %v bound)", st.Epoch, high, st.Inherited, bound)
	}

	// The way back: a new id, -join, an empty data directory.
	if err := l.RemoveMember("n4"); err != nil {
		t.Fatalf("remove n4: %v", err)
	}
	c.place("n5")
	n5 := c.open("n5", c.peers(lid, lag), true)
	if err := l.AddMember("n5", c.addrs["n5"]); err != nil {
		t.Fatalf("add n5: %v", err)
	}
	batontest.Eventually(t, settle, func() bool { return n5.fsm.get().Epoch >= l.fsm.get().Epoch && n5.isMember("n5") }, "n5 did not catch up")
	batontest.Eventually(t, settle, func() bool { return slices.Contains(l.fsm.get().Joined, "n5") }, "n5 not recorded as holding the log")
}

// openErr is open for a node that must be refused at once.
func (c *diskCluster) openErr(id string, peers []Peer) error {
	c.t.Helper()
	cfg := diskConfig(id)
	cfg.RaftAddr, cfg.DataDir, cfg.Peers = c.addrs[id], c.dirs[id], peers
	n, err := Open(context.Background(), cfg)
	if err == nil {
		n.Close()
	}
	return err
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRolledBackLogRefused: a member whose raft.db is put back from an
// older copy (a restored backup) holds less than it acknowledged: a term
// in which it may have voted, entries counted in commits. It refuses to
// start, saying how to come back, and so does one whose raft.db is gone
// while the rest of its Raft directory is there. The same copy put back
// as it was starts, and a node with state but no mark yet (an older
// version's directory) gets one.
func TestRolledBackLogRefused(t *testing.T) {
	c := newDiskCluster(t)
	c.place("n1", "n2", "n3")
	founders := c.peers("n1", "n2", "n3")
	for _, p := range founders {
		c.open(p.ID, founders, false)
	}
	lid, l := c.leading()
	f := "n1"
	if f == lid {
		f = "n2"
	}
	batontest.Eventually(t, settle, func() bool { return c.nodes[f].fsm.get().Epoch == l.fsm.get().Epoch }, "%s did not catch up", f)
	db := c.dirs[f] + "/raft/raft.db"
	c.stop(f)
	old := t.TempDir() + "/old.db"
	copyFile(t, db, old)
	c.open(f, founders, false)
	// More terms and entries, which f acknowledges.
	for range 2 {
		c.handover()
	}
	_, l = c.leading()
	if err := l.NoteLease(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	batontest.Eventually(t, settle, func() bool { return c.nodes[f].bound() == 20*time.Second }, "%s did not get the bound", f)
	c.stop(f)
	current := t.TempDir() + "/current.db"
	copyFile(t, db, current)

	copyFile(t, old, db)
	err := c.openErr(f, founders)
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "baton cluster remove "+f) {
		t.Fatalf("%s with its raft.db put back from an older copy: %v, want refused (ErrRolledBack) with the way back", f, err)
	}
	t.Logf("rolled back: %v", err)

	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	err = c.openErr(f, founders)
	if !errors.Is(err, ErrLostData) {
		t.Fatalf("%s with its raft.db gone: %v, want refused (ErrLostData)", f, err)
	}
	t.Logf("raft.db gone: %v", err)

	copyFile(t, current, db)
	if err := os.Remove(c.dirs[f] + "/raft/" + logMarkFile); err != nil {
		t.Fatal(err)
	}
	n := c.open(f, founders, false)
	batontest.Eventually(t, settle, func() bool { return n.bound() == 20*time.Second }, "%s does not follow after its own raft.db came back", f)
	if m, ok, err := readLogMark(c.dirs[f] + "/raft"); !ok || err != nil || m.Term == 0 || m.LastIndex == 0 {
		t.Fatalf("mark after a start without one: %+v %v %v, want one from the state", m, ok, err)
	}
}

// TestStoredMarkOfNodeThatNeverVoted: a member that never voted (added
// with -join, sent the log by the leader) has a current term and no vote
// term in raft.db; its mark reads that as 0, and it restarts.
func TestStoredMarkOfNodeThatNeverVoted(t *testing.T) {
	dir := t.TempDir()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	snaps := raft.NewInmemSnapshotStore()
	if err := bolt.SetUint64(keyCurrentTerm, 3); err != nil {
		t.Fatal(err)
	}
	if err := bolt.StoreLog(&raft.Log{Index: 1, Term: 2, Type: raft.LogCommand}); err != nil {
		t.Fatal(err)
	}
	got, err := storedMark(bolt, bolt, snaps)
	if want := (logMark{Term: 3, LastIndex: 1, LastTerm: 2}); err != nil || got != want {
		t.Fatalf("mark of a node that never voted: %+v, %v; want %+v", got, err, want)
	}
	cfg := testConfig("n9")
	if _, err := checkDataDir(cfg, dir, bolt, bolt, snaps); err != nil {
		t.Fatalf("restart of a node that never voted: %v", err)
	}
}

// TestJoinWithAMemberDown: a node added with -join while one of three
// founders is down makes a quorum of three of four at once, so the leader
// needs the new node's answer within one leader lease timeout or it steps
// down, and then no leader can be elected without the new node, which
// waits for a leader to say it never held the log: the cluster would stay
// leaderless until the founder came back. On plain TCP the new node's
// questions before it is added go unanswered (it is no member yet), so it
// must ask again the moment the leader's first message reaches it. Every
// node has an IP of its own, as on separate hosts, and the test timers (a
// leader lease timeout of 150 ms) make the race tight.
func TestJoinWithAMemberDown(t *testing.T) {
	c := newDiskCluster(t)
	ids := []string{"n1", "n2", "n3", "n4"}
	for i, a := range loopbackAddrs(t, len(ids)) {
		_, port, _ := net.SplitHostPort(a)
		dir, err := os.MkdirTemp(c.base, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		c.addrs[ids[i]], c.dirs[ids[i]] = net.JoinHostPort(loopbackSource(t, 30+i).String(), port), dir
	}
	open := func(id string, peers []Peer, join bool) *Node {
		cfg := testConfig(id)
		cfg.RaftAddr, cfg.DataDir, cfg.Peers, cfg.Join = c.addrs[id], c.dirs[id], peers, join
		cfg.Addr, cfg.OpsAddr = "127.0.0.1:1", "127.0.0.1:2"
		n, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
		n.Start(&nullServer{})
		c.nodes[id] = n
		return n
	}
	founders := c.peers("n1", "n2", "n3")
	for _, p := range founders {
		open(p.ID, founders, false)
	}
	lid, l := c.leading()
	batontest.Eventually(t, settle, func() bool { return len(l.fsm.get().Joined) == 3 }, "founders not recorded as holding the log")
	var up []string
	down := ""
	for _, p := range founders {
		if p.ID != lid && down == "" {
			down = p.ID
			c.stop(down) // one founder down
			continue
		}
		up = append(up, p.ID)
	}
	open("n4", c.peers(up...), true)
	st := l.transport.(*leaseTransport).Transport.(*raftTransport).stream
	batontest.Eventually(t, settle, func() bool { return st.refused[refusedQuestion].Load() > 0 },
		"n4's question before it was added was answered: the race is not set up")
	if err := l.AddMember("n4", c.addrs["n4"]); err != nil {
		// A loaded machine may cost a leader its term for other reasons:
		// then a new one must be elected, n4 among its voters. Without
		// n4's answer none ever is.
		t.Logf("add n4 with a founder down: %v; waiting for a leader", err)
	}
	batontest.Eventually(t, settle, func() bool {
		for _, n := range c.nodes {
			if n.Leading() && slices.Contains(n.fsm.get().Joined, "n4") {
				return true
			}
		}
		return false
	}, "no serving leader with n4 recorded as holding the log: the leader lost its quorum waiting for n4, and none can be elected without it")
}
