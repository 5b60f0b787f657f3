package cluster

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// Protocol version 3 on an in-process cluster (Raft's in-memory transport,
// real servers on loopback, raw frames): the key, the planned handover's
// list, a crash successor's initial wait, the records of ends.

// giving waits until the leader gives credentials (every voter recorded as
// speaking version 3, the key created).
func (c *testCluster) giving() *testNode {
	c.t.Helper()
	var l *testNode
	batontest.Eventually(c.t, settle, func() bool {
		l = c.leader()
		return l.node.giving.Load()
	}, "the leader never gave credentials")
	return l
}

// v3Claim makes a claim of version 3 on name at addr: a grant (held) or
// WAITING at pos, with a credential; in the first leader's grace a free
// name answers WAITING first, then the push.
func v3Claim(t *testing.T, addr, name string, lease time.Duration, held bool, pos uint32) (*batontest.Conn, *batontest.Claim) {
	t.Helper()
	c := batontest.Dial(t, addr)
	c.AcquireV3(name, lease, false, 1, false, "raw:"+name)
	cl := &batontest.Claim{Name: name, Lease: lease, Limit: 1}
	f := c.ReadFrame(5 * time.Second)
	if held && f.Type == wire.TypeWaiting {
		f = c.ReadFrame(5 * time.Second)
	}
	if !cl.Update(f) || cl.Held != held || (!held && f.Position != pos) {
		t.Fatalf("%s: got %v, want a grant (%v) or WAITING %d, with a credential", name, f, held, pos)
	}
	return c, cl
}

func resumeAt(t *testing.T, addr string, cl *batontest.Claim) (*batontest.Conn, batontest.Frame) {
	t.Helper()
	c := batontest.Dial(t, addr)
	c.Write(cl.ResumeFrame(t, "raw:"+cl.Name))
	return c, c.ReadFrame(5 * time.Second)
}

// TestClusterKeyOnceEveryVoterSpeaks: while a voter does not speak
// version 3 the leader gives no credential (a claim of version 3 gets the
// frames of version 1); once every voter does, the key is created, once,
// and kept across a change of leader.
func TestClusterKeyOnceEveryVoterSpeaks(t *testing.T) {
	testSpeaks.Store("n3", uint8(wire.Version2))
	t.Cleanup(func() { testSpeaks.Delete("n3") })
	c := newTestCluster(t, 3)
	l := c.leader()
	time.Sleep(2 * joinedEvery) // the leader has asked the voters
	if l.node.giving.Load() || l.node.fsm.get().ResumeKey != nil {
		t.Fatal("credentials given, or a key created, while a voter speaks version 2")
	}
	for _, tn := range c.nodes {
		if tn.node.View().Resumable {
			t.Fatalf("%s's /v1/cluster says resumable while a voter speaks version 2", tn.node.cfg.NodeID)
		}
	}
	conn := batontest.Dial(t, l.addr)
	conn.AcquireV3("k/old", 10*time.Second, false, 1, false, "")
	f := conn.ReadFrame(5 * time.Second)
	if f.Type == wire.TypeWaiting {
		f = conn.ReadFrame(5 * time.Second)
	}
	if f.Type != wire.TypeAcquired || f.WithCredential || len(f.Payload) != 9 {
		t.Fatalf("got %v (%d bytes), want the ACQUIRED of version 1", f, len(f.Payload))
	}

	testSpeaks.Store("n3", uint8(wire.Version3))
	l = c.giving()
	key := l.node.fsm.get().ResumeKey
	batontest.Eventually(t, settle, func() bool {
		for _, tn := range c.nodes {
			if !tn.node.View().Resumable {
				return false
			}
		}
		return true
	}, "a node's /v1/cluster never said resumable once the leader gave credentials")
	_, cl := v3Claim(t, l.addr, "k/new", 10*time.Second, true, 0)
	if err := l.node.r().LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	batontest.Eventually(t, settle, func() bool { n := c.leader(); return n != l && n.node.giving.Load() }, "no new leader giving credentials")
	n := c.leader()
	if got := n.node.fsm.get().ResumeKey; !bytes.Equal(got, key) {
		t.Fatal("the key changed with the leader")
	}
	// The claim of the old leader resumes on the new one: the same key.
	_, f = resumeAt(t, n.addr, cl)
	if f.Type != wire.TypeAcquired || f.Token != cl.ID {
		t.Fatalf("resume on the new leader: got %v, want ACQUIRED %d", f, cl.ID)
	}
}

// TestClusterPlannedHandoverKeepsClaims: a handover chooses its successor
// first, tells the claims of version 3 NOT_LEADER naming it, lists them
// through Raft with the holders of version 1 that did not close; on the
// successor the holder resumes with its token, its waiter keeps its place,
// each name grants only once its own listed claims are accounted for
// (a NOWAIT meanwhile is BUSY), and the list is dropped once the
// successor has served its grace.
func TestClusterPlannedHandoverKeepsClaims(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.giving()
	const lease, short = 10 * time.Second, 2 * time.Second
	h, hc := v3Claim(t, l.addr, "x", lease, true, 0)
	w, wc := v3Claim(t, l.addr, "x", lease, false, 1)
	g, _ := v3Claim(t, l.addr, "y", short, true, 0) // will not come back
	v1, got := acquire(t, l.addr, "v1", short, false)
	if got.Type == wire.TypeWaiting {
		got = v1.ReadFrame(5 * time.Second)
	}
	if got.Type != wire.TypeAcquired {
		t.Fatalf("v1: got %v", got)
	}
	listed := time.Now()
	done := make(chan error, 1)
	go func() { done <- l.node.Handover() }()
	var hint string
	for _, conn := range []*batontest.Conn{h, w, g} {
		f := conn.ReadFrame(5 * time.Second)
		if f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
			t.Fatalf("got %v, want NOT_LEADER naming the successor", f)
		}
		hint = f.Err.Msg
		conn.Conn.Close()
	}
	// A resume sent at once, while the handover goes on (the drain of the
	// holder of version 1, the list, the transfer): the successor holds it
	// until it serves, rather than answering NOT_LEADER.
	h2 := batontest.Dial(t, hint)
	early := make(chan batontest.Frame, 1)
	go func() {
		h2.Write(hc.ResumeFrame(t, "raw:x"))
		f, _ := h2.TryReadFrame(10 * time.Second)
		early <- f
	}()
	if f := v1.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeShutdown {
		t.Fatalf("the holder of version 1: got %v, want SHUTDOWN", f)
	} // and it does not close
	if err := <-done; err != nil {
		t.Fatalf("handover: %v", err)
	}
	s := c.leader()
	if s == l || hint != s.addr {
		t.Fatalf("NOT_LEADER named %q, the successor is %s at %s", hint, s.id, s.addr)
	}
	started := time.Now()
	if st := s.node.fsm.get(); st.List == nil || !st.List.Complete || st.List.Claims != 4 {
		t.Fatalf("the list in the replicated state: %+v, want it whole with 4 claims", st.List)
	}
	f := <-early
	if f.Type == wire.TypeError && f.Err.Code == wire.CodeNotLeader {
		// The entry that names the successor is committed before the
		// claims are told, but a follower applies a commit only on the
		// leader's next message: a resume that arrives first is answered
		// NOT_LEADER, and the client tries again, as on any NOT_LEADER.
		t.Logf("the resume sent during the handover reached the successor before it knew: %v; again", f)
		h2.Conn.Close()
		h2, f = resumeAt(t, s.addr, hc)
	}
	if f.Type != wire.TypeAcquired || !f.WithCredential || f.Token != hc.ID {
		t.Fatalf("the holder's resume, sent during the handover: got %v, want it held and then ACQUIRED %d with a credential", f, hc.ID)
	}
	_, busy := acquire(t, s.addr, "x", lease, true)
	wantError(t, busy, wire.CodeBusy)
	w2, f := resumeAt(t, s.addr, wc)
	if f.Type != wire.TypeWaiting || f.Ticket != wc.ID || f.Position != 1 {
		t.Fatalf("the waiter's resume: got %v, want WAITING 1 with ticket %d", f, wc.ID)
	}
	h2.Conn.Close()
	if f := w2.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || !f.Push || f.Token <= hc.ID {
		t.Fatalf("after the holder's release: got %v, want the push above %d", f, hc.ID)
	}
	queued := map[string]*batontest.Conn{}
	for _, name := range []string{"y", "v1"} {
		q, f := acquire(t, s.addr, name, lease, false)
		if f.Type != wire.TypeWaiting {
			t.Fatalf("%s: got %v, want WAITING behind the listed holder", name, f)
		}
		queued[name] = q
	}
	for name, q := range queued {
		p := q.ReadFrame(short + 5*time.Second)
		if p.Type != wire.TypeAcquired || !p.Push {
			t.Fatalf("%s: got %v, want the push once the listed holder's time is up", name, p)
		}
		if waited, left := time.Since(started), short-started.Sub(listed); waited < left-100*time.Millisecond {
			t.Fatalf("%s granted %v after the successor began, before its listed holder's time left %v", name, waited, left)
		}
	}
	batontest.Eventually(t, settle, func() bool { return s.node.fsm.get().List == nil }, "the list was not dropped once the successor served its grace")
}

// TestClusterCrashSuccessorWaits: after a leader is cut off, its successor
// holds a resume until twice the longest leader lease timeout after it
// began (the old leader, only cut off, may serve until then), then takes
// the holder back with its token; a claim that comes back after the grace
// is refused. The successor must keep its leadership through the check:
// an attempt in which it lost it on its own (the two remaining nodes of a
// loaded machine, at the tests' 150 ms leader lease) is tried again.
func TestClusterCrashSuccessorWaits(t *testing.T) {
	for attempt := 1; ; attempt++ {
		lost := crashSuccessorWaits(t)
		if lost == "" {
			return
		}
		if attempt == 3 {
			t.Fatalf("the successor lost its leadership on its own in %d attempts; the last: %s", attempt, lost)
		}
		t.Logf("attempt %d: the successor lost its leadership on its own (%s); again", attempt, lost)
	}
}

// crashSuccessorWaits is one attempt of TestClusterCrashSuccessorWaits; it
// returns why, if the successor stopped leading before the check ended.
func crashSuccessorWaits(t *testing.T) (lost string) {
	c := newTestCluster(t, 3)
	defer c.connectAll()
	l := c.giving()
	const lease = 3 * time.Second
	h, hc := v3Claim(t, l.addr, "z", lease, true, 0)
	late, lc := v3Claim(t, l.addr, "z2", lease, true, 0)
	l.trans.DisconnectAll()
	for _, tn := range c.nodes {
		tn.trans.Disconnect(raft.ServerAddress(l.id))
	}
	for _, conn := range []*batontest.Conn{h, late} {
		if f := conn.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
			t.Fatalf("got %v, want NOT_LEADER from the cut-off leader", f)
		}
		conn.Conn.Close()
	}
	var n *testNode
	batontest.Eventually(t, settle, func() bool {
		for _, tn := range c.nodes {
			if tn != l && tn.node.Leading() {
				n = tn
				return true
			}
		}
		return false
	}, "no successor")
	began := time.Now()
	h2, f := resumeAt(t, n.addr, hc)
	waited := time.Since(began)
	if f.Type != wire.TypeAcquired || f.Token != hc.ID {
		t.Fatalf("the holder's resume in the crash grace: got %v, want ACQUIRED %d", f, hc.ID)
	}
	if waited < 2*testLeaderLease-50*time.Millisecond {
		t.Fatalf("the resume was answered %v after the successor began, before twice the leader lease (%v)", waited, 2*testLeaderLease)
	}
	term := n.node.r().CurrentTerm()
	for end := time.Now().Add(lease + 2*testLeaderLease + 500*time.Millisecond); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		h2.Heartbeat()
		f := h2.ReadFrame(5 * time.Second)
		if f.Type == wire.TypeError && f.Err.Code == wire.CodeNotLeader && (n.node.r().CurrentTerm() != term || !n.node.Leading()) {
			return fmt.Sprintf("heartbeat answered %v; term %d, the successor's was %d", f, n.node.r().CurrentTerm(), term)
		}
		if f.Type != wire.TypeAcquired || f.Token != hc.ID {
			t.Fatalf("heartbeat: got %v, want ACQUIRED %d", f, hc.ID)
		}
	}
	_, f = resumeAt(t, n.addr, lc)
	wantError(t, f, wire.CodeResumeRefused)
	return ""
}

// TestClusterReleaseRecorded: an operator's release of a claim of version
// 3 is recorded through Raft before the claim leaves the table: after the
// leader is cut off, the successor's grace does not take it back, though
// its fresh table knows nothing of it; a claim not released comes back.
func TestClusterReleaseRecorded(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.giving()
	const lease = 5 * time.Second
	r, rc := v3Claim(t, l.addr, "rel", lease, true, 0)
	k, kc := v3Claim(t, l.addr, "kept", lease, true, 0)
	if _, err := l.srv.ForceReleaseAll("rel"); err != nil {
		t.Fatal(err)
	}
	if f := r.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeForceReleased {
		t.Fatalf("got %v, want FORCE_RELEASED", f)
	}
	for _, tn := range c.nodes {
		batontest.Eventually(t, settle, func() bool { return len(tn.node.fsm.get().Records) == 1 }, "%s has not the record", tn.id)
	}
	l.trans.DisconnectAll()
	for _, tn := range c.nodes {
		tn.trans.Disconnect(raft.ServerAddress(l.id))
	}
	k.ReadFrame(5 * time.Second) // NOT_LEADER
	k.Conn.Close()
	var n *testNode
	batontest.Eventually(t, settle, func() bool {
		for _, tn := range c.nodes {
			if tn != l && tn.node.Leading() {
				n = tn
				return true
			}
		}
		return false
	}, "no successor")
	_, f := resumeAt(t, n.addr, rc)
	wantError(t, f, wire.CodeResumeRefused)
	_, f = resumeAt(t, n.addr, kc)
	if f.Type != wire.TypeAcquired || f.Token != kc.ID {
		t.Fatalf("the claim not released: got %v, want ACQUIRED %d", f, kc.ID)
	}
	c.connectAll()
}

// TestListEntries: a list of 100,000 claims goes through Raft in entries
// of at most 64 KiB that decode to the list; a handoff whose count or
// digest does not match its entries is refused, and the next epoch then
// starts as after a crash.
func TestListEntries(t *testing.T) {
	list := &server.HandoverList{Epoch: 7}
	for i := range 100000 {
		list.Claims = append(list.Claims, server.HandoverClaim{Name: fmt.Sprintf("jobs/%05d", i/3), Limit: 1, Lease: 10 * time.Second,
			Token: 7<<counterBits | uint64(i+1), Left: 9 * time.Second})
	}
	chunks := server.EncodeHandover(list, maxListChunk)
	total := 0
	for _, ch := range chunks {
		if e := listEntry(7, 0, ch); len(e) > maxListEntry {
			t.Fatalf("an entry of %d bytes, want at most %d", len(e), maxListEntry)
		}
		total += len(ch)
	}
	back, err := server.DecodeHandover(chunks)
	if err != nil || len(back.Claims) != len(list.Claims) {
		t.Fatalf("decoded %d claims (%v), want %d", len(back.Claims), err, len(list.Claims))
	}
	t.Logf("100,000 claims: %d entries, %d bytes", len(chunks), total)

	f := newFSM()
	apply := func(i uint64, data []byte) any {
		return f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: data})
	}
	for e := 1; e <= 7; e++ {
		apply(uint64(e), mustJSON(t, command{Op: opEpoch, Node: "n1", LeaderLease: time.Second}))
	}
	for i, ch := range chunks[:len(chunks)-1] { // one entry short
		apply(uint64(10+i), listEntry(7, i, ch))
	}
	res := apply(1000, mustJSON(t, command{Op: opHandoff, Epoch: 7, ListChunks: len(chunks), ListClaims: len(list.Claims), ListDigest: listDigest(chunks)}))
	if res != errListIncomplete {
		t.Fatalf("handoff of a list one entry short: %v, want errListIncomplete", res)
	}
	if r := apply(1001, mustJSON(t, command{Op: opEpoch, Node: "n2", LeaderLease: time.Second})).(epochResult); r.Planned {
		t.Fatalf("epoch after a handoff that was refused: %+v, want a crash epoch", r)
	}
	// Whole: the epoch after it is planned, and inherits the list's
	// longest time left.
	for i, ch := range chunks {
		apply(uint64(2000+i), listEntry(8, i, ch))
	}
	apply(3000, mustJSON(t, command{Op: opHandoff, Epoch: 8, ListChunks: len(chunks), ListClaims: len(list.Claims), ListDigest: listDigest(chunks), ListLeft: 9 * time.Second}))
	r := apply(3001, mustJSON(t, command{Op: opEpoch, Node: "n3", LeaderLease: time.Second})).(epochResult)
	if st := f.get(); !r.Planned || st.Inherited != 9*time.Second || st.List == nil || !st.List.Complete {
		t.Fatalf("epoch after a whole list: %+v, inherited %v, list %v; want planned, inheriting 9s, the list kept", r, st.Inherited, st.List != nil)
	}
	apply(3002, mustJSON(t, command{Op: opServed, Epoch: 9}))
	if f.get().List != nil {
		t.Fatal("the list was kept after the next epoch served its grace")
	}
}
