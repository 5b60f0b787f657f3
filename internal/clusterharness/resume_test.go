package clusterharness

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/wire"
)

// Protocol version 3: claims that survive a change of leader. The
// workloads here are the ones that can see a broken resume, each driven
// by the Go client (which speaks version 3 and moves its claim on its
// own) against real nodes, with raw version 3 frames where a client must
// misbehave:
//
//   - long holders and queued waiters (10 s leases) across the cycle's
//     fault: a holder must keep its claim (rule 4 of the checker: a loss
//     seen before its deadline is a LOST claim), the waiters their order
//     (rule 5, FIFO);
//   - a holder that releases at the instant of the fault (its close races
//     the move), with a waiter behind it;
//   - a holder whose link is cut just before a SIGTERM: it neither sees
//     the end nor resumes, and believes to its deadline; the successor's
//     planned list must keep its slot until then, while a waiter behind
//     it resumes at once;
//   - a resume replayed by another client: the credential of a claim that
//     was released, sent on a new connection after the fault (a later
//     holder holds the name); and a forged resume (a live holder's token
//     and generation, bytes of a credential nobody issued);
//   - a resume after the deadline: a holder cut off at the fault that
//     comes back after the new leader's grace, once a later holder has
//     been and gone;
//   - a conflict: a holder that went silent (its claim expired and the
//     name went to the waiter behind it) resumes in the crash grace after
//     that waiter moved: the higher token must win.
//
// A resume a correct server must refuse that is answered ACQUIRED is
// recorded as a violation, and its hold (it then believes and writes as a
// holder) gives the checker the overlap or the token that fell.

// resumeLease is the lease of the claims that must survive: a crash
// failover (some 2 s) leaves most of their 8 s deadline.
const resumeLease = 10 * time.Second

// resumeFault is the fault of one cycle.
type resumeFault int

const (
	rfTerm        resumeFault = iota // SIGTERM of the leader (restarted): a planned handover
	rfKill                           // kill -9 of the leader (restarted)
	rfKillTwice                      // kill -9, then kill -9 of the next leader in its grace
	rfPartitioned                    // kill -9, then the next leader's Raft link cut in its grace
)

func (f resumeFault) String() string {
	return [...]string{"SIGTERM of the leader", "kill -9 of the leader", "kill -9, then kill -9 in the grace",
		"kill -9, then the new leader partitioned"}[f]
}

func (f resumeFault) crash() bool { return f != rfTerm }

// goClaim is one claim of a Go client: a holder that holds until release
// is closed, or a waiter that holds for holdFor once granted.
type goClaim struct {
	id      int
	name    string
	queued  chan struct{} // closed on its first WAITING
	granted chan struct{} // closed once it holds
	release chan struct{}
	done    chan struct{}
	lock    atomic.Pointer[baton.Lock]
}

// claim starts a Go client (lease resumeLease) that takes name; its
// claim must survive every fault (a failed Acquire is a LOST claim).
func (w *workload) claim(t *testing.T, addrs []string, id int, name string, holdFor time.Duration) *goClaim {
	t.Helper()
	c, err := baton.New(addrs, baton.WithLease(resumeLease), baton.WithOwner(fmt.Sprintf("v3-%d", id)),
		baton.WithDialTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	g := &goClaim{id: id, name: name, queued: make(chan struct{}), granted: make(chan struct{}),
		release: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(g.done)
		ctx, cancel := context.WithTimeout(w.ctx, 3*time.Minute)
		defer cancel()
		l, err := c.Acquire(ctx, name, baton.WithWaitingFunc(func(int) { once.Do(func() { close(g.queued) }) }))
		if err != nil {
			if w.ctx.Err() == nil {
				w.mu.Lock()
				w.lost = append(w.lost, fmt.Sprintf("lock %q: LOST: client %d's Acquire failed at %s: %v",
					name, id, time.Now().Format("15:04:05.000"), err))
				w.mu.Unlock()
			}
			return
		}
		g.lock.Store(l)
		release := g.release
		if holdFor > 0 {
			release = nil
		}
		w.holdSurviving(id, l, release, holdFor, g.granted)
	}()
	return g
}

// holdSurviving holds l until release is closed (or for holdFor), writing
// the register every 100 ms, and records the hold as one that must
// survive, with the last deadline its client gave it.
func (w *workload) holdSurviving(id int, l *baton.Lock, release <-chan struct{}, holdFor time.Duration, granted chan struct{}) {
	h := &hold{client: id, name: l.Name(), token: l.Token(), granted: time.Now(), survive: true, validUntil: l.ValidUntil()}
	lostAt := make(chan time.Time, 1)
	stop := context.AfterFunc(l.Context(), func() { lostAt <- time.Now() })
	if seen := w.reg.read(h.name); seen > h.token {
		h.readAbove = seen
	}
	w.mu.Lock()
	w.holds = append(w.holds, h)
	w.mu.Unlock()
	close(granted)
	var timeUp <-chan time.Time
	if holdFor > 0 {
		tm := time.NewTimer(holdFor)
		defer tm.Stop()
		timeUp = tm.C
	}
	sample := time.NewTicker(50 * time.Millisecond)
	defer sample.Stop()
	write := time.NewTicker(100 * time.Millisecond)
	defer write.Stop()
	for working := true; working; {
		select {
		case <-sample.C:
			if v := l.ValidUntil(); !v.IsZero() {
				w.mu.Lock()
				h.validUntil = v
				w.mu.Unlock()
			}
		case <-write.C:
			if l.Err() == nil {
				w.reg.write(h.name, h.token)
			}
		case <-timeUp:
			w.reg.write(h.name, h.token)
			working = false
		case <-release:
			working = false
		case <-l.Done():
			working = false
		case <-w.ctx.Done():
			working = false
		}
	}
	end, lost := time.Now(), error(nil)
	if !stop() {
		end, lost = <-lostAt, l.Err()
	}
	w.mu.Lock()
	h.ended, h.lost = end, lost
	w.mu.Unlock()
	l.Release()
}

// waitFor waits for ch, failing the test after within.
func waitFor(t *testing.T, ch <-chan struct{}, within time.Duration, format string, args ...any) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("after %v: "+format, append([]any{within}, args...)...)
	}
}

// moved waits until g's claim has been confirmed by a reply to a frame
// sent after at (its deadline is then beyond at + 0.8 × lease), or has
// ended; false if neither within 40 s.
func (g *goClaim) moved(at time.Time) bool {
	l := g.lock.Load()
	for end := time.Now().Add(40 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if l.Err() != nil || l.ValidUntil().After(at.Add(resumeLease*4/5)) {
			return true
		}
	}
	return false
}

// rawHolder is a raw version 3 believer holding name on node i (it holds
// for an hour: the scenario ends it).
func (w *workload) rawHolder(t *testing.T, c *testCluster, id int, name string, lease time.Duration, i int, beats beatMode) (*believer, *bsession, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	b := &believer{w: w, ctx: ctx, id: id, name: name, lease: lease, v3: true, beats: beats, every: 100 * time.Millisecond}
	s := startSession(t, c, b, i)
	if s.credential().id == 0 {
		t.Fatalf("raw holder %d of %q: the grant carried no credential", id, name)
	}
	return b, s, cancel
}

// waitCredentials waits until the leader gives version 3 claims a
// credential (once every voter has recorded that it speaks version 3).
func (c *testCluster) waitCredentials() {
	c.t.Helper()
	c.eventually(leaderWait, func() bool {
		i := c.leader()
		if i == 0 {
			return false
		}
		w := newWorkload()
		defer w.stop()
		b := &believer{w: w, id: 9999, name: "credential-probe", lease: time.Second, v3: true, every: time.Hour}
		s := newBelieverSession(i)
		go b.session(c.nw.clientAddr(i), s, 0)
		<-s.done
		return s.credential().id != 0
	}, "the leader gives no credentials")
}

// resumeFrame is a holder's resume of cred's claim of name with lease,
// attempt n; with forge, the credential's bytes are random.
func resumeFrame(t *testing.T, name string, lease time.Duration, owner string, cred v3Cred, n uint16, forge bool) []byte {
	t.Helper()
	r := wire.Resume{ID: cred.id, Generation: cred.generation, Attempt: n, Credential: cred.credential}
	if forge {
		rand.Read(r.Credential[:])
	}
	f, err := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version3, Flags: wire.FlagResume | wire.FlagHeld,
		LeaseMs: uint32(lease / time.Millisecond), Limit: 1, Resume: r, Name: name, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// resumeOn sends frame, a resume of a claim of name with lease, to the
// serving leader as believer id (following NOT_LEADER), and returns its
// hold if it was answered ACQUIRED (it then believes and writes as any
// holder for holdFor, and what is a violation is recorded with what),
// else the ERROR it was answered.
func (w *workload) resumeOn(t *testing.T, c *testCluster, id int, name string, lease time.Duration, frame []byte, holdFor time.Duration, what string) (*hold, *wire.Error) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		i := c.leader()
		if i == 0 {
			continue
		}
		b := &believer{w: w, ctx: w.ctx, id: id, name: name, lease: lease, v3: true, first: frame, every: 100 * time.Millisecond}
		s := newBelieverSession(i)
		go b.session(c.nw.clientAddr(i), s, holdFor)
		select {
		case <-s.done:
		case <-time.After(holdFor + time.Minute):
			t.Fatalf("%s: the resume's session did not end", what)
		}
		if s.hold != nil {
			w.mu.Lock()
			w.bad = append(w.bad, fmt.Sprintf("lock %q: %s was answered ACQUIRED (token %d) at %s", name, what, s.hold.token,
				s.hold.granted.Format("15:04:05.000")))
			w.mu.Unlock()
			return s.hold, nil
		}
		we := s.refusal()
		if we != nil && we.Code == wire.CodeNotLeader {
			continue
		}
		return nil, we
	}
	t.Fatalf("%s: no leader answered within 60 s", what)
	return nil, nil
}

// cycleIDs numbers the clients of a cycle apart from every other's.
func cycleIDs(k int) func() int {
	next := 10000 + 100*k
	return func() int { next++; return next }
}

// resumeCycle runs one cycle of the workloads around fault f on c. With
// only set, it runs those parts alone (the mutation gate runs the part
// its knob breaks). Names are the cycle's own (suffix k).
func resumeCycle(t *testing.T, c *testCluster, w *workload, k int, f resumeFault, only ...string) {
	t.Helper()
	part := func(p string) bool { return len(only) == 0 || slices.Contains(only, p) }
	addrs := c.clientAddrs()
	nextID := cycleIDs(k)
	l1 := c.waitLeader()
	cluster1, err := c.view(l1)
	if err != nil {
		t.Fatal(err)
	}
	note := func(format string, args ...any) { t.Logf("cycle %d (%s): "+format, append([]any{k, f}, args...)...) }

	// Long holders, each with three waiters queued in order behind it.
	var holders, waiters []*goClaim
	if part("holders") {
		for j := 1; j <= 3; j++ {
			name := fmt.Sprintf("hold%d-%d", k, j)
			h := w.claim(t, addrs, nextID(), name, 0)
			waitFor(t, h.granted, grantWait, "holder of %q not granted", name)
			holders = append(holders, h)
			var order []int
			for range 3 {
				q := w.claim(t, addrs, nextID(), name, 300*time.Millisecond)
				waitFor(t, q.queued, grantWait, "waiter %d of %q not queued", q.id, name)
				waiters = append(waiters, q)
				order = append(order, q.id)
			}
			w.mu.Lock()
			w.queues[name] = order
			w.mu.Unlock()
		}
	}
	// A release at the instant of the fault, a waiter behind it.
	var racer *goClaim
	if part("race") {
		name := fmt.Sprintf("race%d", k)
		racer = w.claim(t, addrs, nextID(), name, 0)
		waitFor(t, racer.granted, grantWait, "holder of %q not granted", name)
		q := w.claim(t, addrs, nextID(), name, 300*time.Millisecond)
		waitFor(t, q.queued, grantWait, "waiter of %q not queued", name)
		waiters = append(waiters, q)
	}
	// A released claim's credential, for a replay; a later holder.
	var replayed v3Cred
	var replayName string
	var replayHolder *goClaim
	if part("replay") || part("forge") {
		replayName = fmt.Sprintf("replay%d", k)
		_, s, cancel := w.rawHolder(t, c, nextID(), replayName, resumeLease, l1, beatAfterReply)
		replayed = s.credential()
		cancel() // it closes: the release
		<-s.done
		replayHolder = w.claim(t, addrs, nextID(), replayName, 0)
		waitFor(t, replayHolder.granted, grantWait, "holder of %q not granted", replayName)
		holders = append(holders, replayHolder)
	}
	// A listed holder that never comes back (cut before a SIGTERM), and
	// a waiter behind it.
	var listedSession *bsession
	if part("listed") && f == rfTerm {
		name := fmt.Sprintf("listed%d", k)
		_, listedSession, _ = w.rawHolder(t, c, nextID(), name, resumeLease, l1, beatAfterReply)
		q := w.claim(t, addrs, nextID(), name, 300*time.Millisecond)
		waitFor(t, q.queued, grantWait, "waiter of %q not queued", name)
		waiters = append(waiters, q)
	}
	// A holder that will resume after the deadline (2 s lease).
	var late v3Cred
	var lateName string
	var lateSession *bsession
	if part("late") && f.crash() {
		lateName = fmt.Sprintf("late%d", k)
		_, lateSession, _ = w.rawHolder(t, c, nextID(), lateName, 2*time.Second, l1, beatAfterReply)
	}
	// A holder that goes silent: its claim expires and the waiter behind
	// it is granted; it will resume in the crash grace.
	var silent v3Cred
	var silentName string
	var silentWinner *goClaim
	if part("conflict") && f.crash() {
		silentName = fmt.Sprintf("silent%d", k)
		_, s, _ := w.rawHolder(t, c, nextID(), silentName, 3*time.Second, l1, beatManual)
		silentWinner = w.claim(t, addrs, nextID(), silentName, 0)
		waitFor(t, silentWinner.granted, grantWait, "the waiter behind the silent holder of %q not granted", silentName)
		<-s.done
		silent = s.credential()
		holders = append(holders, silentWinner)
	}

	// A forged credential for the holder of replayName (a valid
	// generation, bytes nobody issued), with a high attempt number: on the
	// leader that holds the claim, then (below) after the fault.
	forge := func(when string) {
		l := replayHolder.lock.Load()
		forged := v3Cred{id: l.Token(), held: true, generation: replayed.generation}
		what := "a resume with a forged credential " + when
		h, we := w.resumeOn(t, c, nextID(), replayName, resumeLease, resumeFrame(t, replayName, resumeLease, "forger", forged, 1000, true),
			3*time.Second, what)
		switch {
		case h != nil:
			note("%s answered ACQUIRED: %v", what, h)
		case we != nil:
			note("%s answered %v", what, we.Code)
		default:
			note("%s: no answer before its deadline", what)
		}
	}
	if part("forge") {
		forge("before the fault")
	}

	// The fault.
	at := time.Now()
	if lateSession != nil {
		lateSession.setLink(linkCut)
		late = lateSession.credential()
	}
	if listedSession != nil {
		// A heartbeat confirmed first: it then believes for most of
		// 0.8 × lease after the fault.
		n := listedSession.replies.Load()
		listedSession.beat()
		c.eventually(startWait, func() bool { return listedSession.replies.Load() > n }, "the listed holder's heartbeat was not answered")
		listedSession.setLink(linkCut)
	}
	if racer != nil {
		go close(racer.release)
	}
	switch f {
	case rfTerm:
		c.terminate(l1)
		c.start(l1)
	case rfKill: // restarted once another leads
		c.kill(l1)
		c.waitLeader(l1)
		c.start(l1)
	case rfKillTwice, rfPartitioned:
		c.kill(l1)
		l2 := c.waitLeader(l1)
		c.start(l1)
		time.Sleep(500 * time.Millisecond) // into its grace: its resumes arrive
		if f == rfKillTwice {
			c.kill(l2)
			c.waitLeader(l2)
			c.start(l2)
		} else {
			cut := time.Now()
			c.nw.setRaftLink(t, l2, false)
			c.waitLeader(l2)
			time.Sleep(4*time.Second - time.Since(cut))
			c.nw.setRaftLink(t, l2, true)
		}
		note("second fault on slot %d", l2)
	}
	l := c.waitLeader()
	note("the fault hit slot %d (epoch %d); leader now slot %d, %v later", l1, cluster1.Epoch, l, time.Since(at).Round(time.Millisecond))

	// Every surviving holder moves, each within its deadline.
	for _, h := range holders {
		if !h.moved(at) {
			t.Errorf("cycle %d: holder %d of %q neither moved nor ended within 40 s", k, h.id, h.name)
		}
	}
	answered := func(what string, h *hold, we *wire.Error) {
		switch {
		case h != nil:
			note("%s answered ACQUIRED: %v", what, h)
		case we != nil:
			note("%s answered %v", what, we.Code)
		default:
			note("%s: no answer before its deadline", what)
		}
	}
	// A resume that the server must refuse is tried only while the
	// holder it would conflict with still holds (one that lost its claim
	// is reported LOST; the refusal then has nothing to protect).
	holds := func(g *goClaim, what string) bool {
		if g.lock.Load().Err() != nil {
			note("%s not tried: the holder of %q lost its claim", what, g.name)
			return false
		}
		return true
	}
	if part("forge") && holds(replayHolder, "the forged resume") {
		forge("after the fault")
	}
	if part("replay") && holds(replayHolder, "the replay") {
		h, we := w.resumeOn(t, c, nextID(), replayName, resumeLease, resumeFrame(t, replayName, resumeLease, "replayer", replayed, 1000, false),
			3*time.Second, "a replayed resume of a released claim")
		answered("a replayed resume of a released claim", h, we)
	}
	if silentWinner != nil && holds(silentWinner, "the silent holder's resume") {
		h, we := w.resumeOn(t, c, nextID(), silentName, 3*time.Second, resumeFrame(t, silentName, 3*time.Second, "silent", silent, 1, false),
			3*time.Second, "a resume of an expired claim with the lower token in a conflict")
		answered("the silent holder's resume (the lower token)", h, we)
	}
	if lateSession != nil {
		// After the grace, once a later holder has been and gone.
		c.eventually(grantWait, func() bool {
			v, err := c.view(c.leader())
			return err == nil && v.GraceRemainingMs == 0
		}, "the new leader's grace did not end")
		probe := w.probe(t, addrs, nextID(), lateName)
		await(t, w, probe, grantWait, "the probe of "+lateName)
		h, we := w.resumeOn(t, c, nextID(), lateName, 2*time.Second, resumeFrame(t, lateName, 2*time.Second, "late", late, 1, false),
			2*time.Second, "a resume after the deadline and the grace")
		answered("a late resume", h, we)
	}

	// The holders release; their waiters are granted in order.
	for _, h := range holders {
		close(h.release)
	}
	for _, g := range slices.Concat(holders, waiters) {
		waitFor(t, g.done, 2*time.Minute, "claim %d of %q did not end", g.id, g.name)
	}
	if racer != nil {
		<-racer.done
	}
	// The holders cut off believe to their deadline, so that an overlap
	// with them is reported whole.
	for _, s := range []*bsession{listedSession, lateSession} {
		if s != nil {
			<-s.done
		}
	}
}

// newResumeCluster starts three nodes of bin with env and a workload.
func newResumeCluster(t *testing.T, bin string, env []string) (*testCluster, *workload) {
	t.Helper()
	nw := newNetwork(t, 3)
	c := newCluster(t, nw, bin, env, 3)
	c.startAll()
	// A fresh cluster on a machine this loaded may take more than
	// leaderWait to have every node follow its first leader.
	c.eventually(3*leaderWait, func() bool { l := c.leader(); return l != 0 && c.allFollow(l) },
		"the cluster did not settle (one leader, every node following it)")
	c.waitCredentials()
	w := newWorkload()
	t.Cleanup(func() { w.stop() })
	return c, w
}

// TestResumeFaults: the version 3 workloads across each fault, against
// the normal build: no overlap, no token that fell, no claim lost, every
// queue kept in order, every replay, forgery and late resume refused.
func TestResumeFaults(t *testing.T) {
	needFaults(t)
	c, w := newResumeCluster(t, batonBin, nil)
	faults := []resumeFault{rfTerm, rfKill, rfKillTwice, rfPartitioned}
	if only := os.Getenv("BATON_RESUME_CYCLES"); only != "" { // a subset, by index: "1,3"
		var some []resumeFault
		for _, f := range strings.Split(only, ",") {
			i, err := strconv.Atoi(f)
			if err != nil || i < 0 || i >= len(faults) {
				t.Fatalf("BATON_RESUME_CYCLES=%q: want indices of %v", only, faults)
			}
			some = append(some, faults[i])
		}
		faults = some
	}
	for k, f := range faults {
		resumeCycle(t, c, w, k, f)
		c.settle()
	}
	v := check(w.stop())
	report := fmt.Sprintf("%d grants over %d faults: %d overlaps, %d lost claims, %d FIFO breaks, %d other violations",
		v.holds, len(faults), len(v.overlaps), len(v.lost), len(v.fifo), len(v.bad))
	if !v.ok() {
		t.Errorf("%s:", report)
		for _, s := range v.violations() {
			t.Error("  " + s)
		}
		return
	}
	t.Log(report)
}

// resumeMutation is a mutation gate's entry of protocol version 3
// (mutation_test.go): cycles of the part its knob breaks, until the
// checker reports a violation that names want (what the knob breaks, not
// a claim lost on the way), at most resumeMutationCycles.
func resumeMutation(f resumeFault, want string, parts ...string) func(t *testing.T, env []string) verdict {
	return func(t *testing.T, env []string) verdict {
		c, w := newResumeCluster(t, faultBin, env)
		for k := range resumeMutationCycles {
			resumeCycle(t, c, w, k, f, parts...)
			if v := check(w.snapshot()); slices.ContainsFunc(v.violations(), func(s string) bool { return strings.Contains(s, want) }) {
				break
			}
			c.settle()
		}
		return check(w.stop())
	}
}

// resumeMutationCycles bounds a knob's cycles: a crash cycle's holder may
// lose its claim to the reset of its resume attempt
// (TestKillLeaderKeepsClaims), and the part is then not tried.
const resumeMutationCycles = 5

// TestResumeKillFigures measures kill -9 of the leader at 10 s leases:
// BATON_RESUME_KILLS=n faults (not run otherwise). Eight Go holders with
// 10 s leases hold throughout (one that loses its claim takes it again);
// Go loops with 1 s leases take other names. Per fault: the holders kept,
// and the first grant after it (a loop's, on the new epoch).
func TestResumeKillFigures(t *testing.T) {
	needFaults(t)
	n, _ := strconv.Atoi(os.Getenv("BATON_RESUME_KILLS"))
	if n <= 0 {
		t.Skip("set BATON_RESUME_KILLS=n to measure n kills of the leader at 10 s leases")
	}
	c, w := newResumeCluster(t, batonBin, nil)
	addrs := c.clientAddrs()
	w.loops(t, 8, 0, addrs, names)
	const nHolders = 8
	holders := make([]*goClaim, nHolders)
	nextID := cycleIDs(100)
	take := func(j int) {
		holders[j] = w.claim(t, addrs, nextID(), fmt.Sprintf("kept%d", j), 0)
		waitFor(t, holders[j].granted, grantWait, "holder %d not granted", j)
	}
	for j := range holders {
		take(j)
	}
	c.waitGrant(w, time.Now(), 0)
	var toFirst []time.Duration
	kept, total, lostEarly := 0, 0, 0
	for i := range n {
		l1 := c.waitLeader()
		v1, err := c.view(l1)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		c.kill(l1)
		c.waitLeader(l1)
		c.start(l1)
		first := c.waitGrantWithin(w, at, v1.Epoch, faultGrantWait)
		toFirst = append(toFirst, first.granted.Sub(at))
		k := 0
		for j, h := range holders {
			h.moved(at)
			total++
			if h.lock.Load().Err() == nil {
				kept++
				k++
				continue
			}
			take(j)
		}
		t.Logf("kill %d of slot %d (epoch %d): first grant %v later; holders kept %d of %d", i+1, l1, v1.Epoch,
			toFirst[i].Round(time.Millisecond), k, nHolders)
		c.settle()
		time.Sleep(2 * time.Second)
	}
	for _, h := range holders {
		close(h.release)
	}
	v := check(w.stop())
	lostEarly = len(v.lost)
	slices.Sort(toFirst)
	t.Logf("FIGURES: %d kills of the leader at 10 s leases: holders kept %d of %d (%d lost before their deadline); first grant after the fault p50 %v, p99 %v, max %v; %d overlaps, %d other violations",
		n, kept, total, lostEarly, pct(toFirst, 50).Round(time.Millisecond), pct(toFirst, 99).Round(time.Millisecond),
		toFirst[len(toFirst)-1].Round(time.Millisecond), len(v.overlaps), len(v.bad))
	if !v.ok() {
		for _, s := range v.violations() {
			t.Error("  " + s)
		}
	}
}

// TestKillLeaderKeepsClaims: a Go client's claim (10 s lease) survives
// kill -9 of the leader: its deadline is 8 s away. Three rounds on one
// cluster, each a holder that releases, the waiter behind it (granted by
// a push), and the kill as soon as the waiter's Acquire returns.
//
// It fails today, in most rounds, with "connection reset by peer": the
// killed node's connections end with a FIN (no ERROR), so the client
// resumes, and its first attempt dials the same address; the dying
// process's listener still completes the handshake from its backlog, and
// resets that connection when the process's descriptors close. The client
// takes a reset of a resume attempt for the loss of the claim
// (docs/protocol.md, section 14, "a reset or another read error: the
// claim is lost"; clients/go/move.go, onAttemptEvent). The same happens
// to a standalone server killed with clients on it. The node had no
// unread bytes on the claim's connection just before the kill (logged).
func TestKillLeaderKeepsClaims(t *testing.T) {
	needFaults(t)
	c, w := newResumeCluster(t, batonBin, nil)
	addrs := c.clientAddrs()
	nextID := cycleIDs(200)
	for k := range 3 {
		name := fmt.Sprintf("push%d", k)
		a := w.claim(t, addrs, nextID(), name, 0)
		waitFor(t, a.granted, grantWait, "holder of %q not granted", name)
		b := w.claim(t, addrs, nextID(), name, 0)
		waitFor(t, b.queued, grantWait, "waiter of %q not queued", name)
		l1 := c.waitLeader()
		close(a.release)
		waitFor(t, b.granted, grantWait, "waiter of %q not granted", name)
		pushed := time.Now()
		queued := c.unread(l1)
		at := time.Now()
		c.kill(l1)
		c.waitLeader(l1)
		c.start(l1)
		b.moved(at)
		t.Logf("round %d: kill -9 of slot %d (sent %v after the waiter's Acquire returned); the waiter's claim: %v; client connections with unread bytes at the node just before: %s", k, l1,
			at.Sub(pushed), errOrHeld(b.lock.Load()), queued)
		close(b.release)
		<-b.done
		c.settle()
	}
	v := check(w.stop())
	if !v.ok() {
		for _, s := range v.violations() {
			t.Error(s)
		}
	}
}

func errOrHeld(l *baton.Lock) string {
	if err := l.Err(); err != nil {
		return "lost: " + err.Error()
	}
	return "held"
}

// unread lists node i's client connections whose receive queue holds
// bytes the node has not read (ss in its namespace): a process that dies
// with unread bytes closes that connection with a reset, not a FIN.
func (c *testCluster) unread(i int) string {
	if !c.nw.netns {
		return "(not known on loopback)"
	}
	out, err := exec.Command("ip", "netns", "exec", c.nw.ns(i), "ss", "-Htn", "state", "established").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(ss: %v)", err)
	}
	var busy []string
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasSuffix(f[2], ":"+strconv.Itoa(clientPort)) {
			continue
		}
		n++
		if f[0] != "0" {
			busy = append(busy, f[0]+" bytes from "+f[3])
		}
	}
	return fmt.Sprintf("%d of %d %v", len(busy), n, busy)
}
