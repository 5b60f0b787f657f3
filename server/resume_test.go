package server_test

import (
	"crypto/ecdsa"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

// Tests of protocol version 3 on one server over TCP with raw frames: a
// clean restart keeps the claims, a listed holder keeps only its own name,
// a holder ended for a broken connection keeps its slot, a write that
// timed out resets, an operator's end is recorded. The move on one server,
// forged, rebound and old credentials and attempt numbers are the vectors'
// conversations (vectors_v3_test.go).

// v3Hold connects and takes name, which must be free, with a claim of
// version 3; it returns the connection and what resumes the claim.
func v3Hold(t *testing.T, ts *batontest.Server, name string, lease time.Duration) (*batontest.Conn, *batontest.Claim) {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.AcquireV3(name, lease, false, 1, false, "test:"+name)
	f := c.ReadFrame(frameWait)
	cl := &batontest.Claim{Name: name, Lease: lease, Limit: 1}
	if f.Type != wire.TypeAcquired || f.Push || !cl.Update(f) {
		t.Fatalf("got %v, want an ACQUIRED reply with a credential", f)
	}
	return c, cl
}

// v3Queue connects and queues for name, which must be held, at pos.
func v3Queue(t *testing.T, ts *batontest.Server, name string, lease time.Duration, pos uint32) (*batontest.Conn, *batontest.Claim) {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.AcquireV3(name, lease, false, 1, false, "test:"+name)
	f := c.ReadFrame(frameWait)
	cl := &batontest.Claim{Name: name, Lease: lease, Limit: 1}
	if f.Type != wire.TypeWaiting || f.Position != pos || !cl.Update(f) {
		t.Fatalf("got %v, want WAITING %d with a ticket", f, pos)
	}
	return c, cl
}

// resume sends cl's resume on a new connection and returns it.
func resume(t *testing.T, ts *batontest.Server, cl *batontest.Claim) *batontest.Conn {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.Write(cl.ResumeFrame(t, "test:"+cl.Name))
	return c
}

// expectResumed reads the answer to a resume: ACQUIRED with the claim's
// token (a holder) or WAITING at pos with its ticket, each with a
// credential, which cl keeps.
func expectResumed(t *testing.T, c *batontest.Conn, cl *batontest.Claim, pos uint32) {
	t.Helper()
	f := c.ReadFrame(frameWait)
	id := cl.ID
	switch {
	case cl.Held && (f.Type != wire.TypeAcquired || f.Push || !f.WithCredential || f.Token != id):
		t.Fatalf("got %v, want ACQUIRED with a credential and token %d", f, id)
	case !cl.Held && (f.Type != wire.TypeWaiting || !f.WithTicket || f.Ticket != id || f.Position != pos):
		t.Fatalf("got %v, want WAITING %d with ticket %d", f, pos, id)
	}
	cl.Update(f)
}

// restart stops ts cleanly (the claims are listed) and starts it again;
// each of conns must be told SHUTDOWN, and then closes, as a client does.
func restart(t *testing.T, ts *batontest.Server, conns ...*batontest.Conn) {
	t.Helper()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ts.Stop(t)
	}()
	for _, c := range conns {
		f := c.ReadFrame(frameWait)
		if f.Type != wire.TypeError || f.Err.Code != wire.CodeShutdown {
			t.Errorf("got %v, want ERROR SHUTDOWN", f)
		}
		c.Conn.Close()
	}
	waitChan(t, stopped, 15*time.Second, "the stop did not end")
	ts.Start(t)
}

// TestResumeAcrossCleanRestart: a clean stop lists the claims of version
// 3; after the restart on the same data directory the holder resumes with
// its token, its waiter keeps its place in front of a new arrival, the
// name grants nothing while its listed holder is pending, and the holder's
// close then hands over to the waiter, with a larger token. The waiter of
// version 1 lost its place, as in version 1.
func TestResumeAcrossCleanRestart(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	h, hc := v3Hold(t, ts, "rs/a", longLease)
	w, wc := v3Queue(t, ts, "rs/a", longLease, 1)
	w1 := queue(t, ts, "rs/a", longLease, 2)
	restart(t, ts, h, w, w1)

	// The listed holder is pending: a new claim may not hold.
	busy := batontest.Dial(t, ts.Addr)
	busy.Acquire("rs/a", longLease, true, "")
	expectError(t, busy, wire.CodeBusy)
	late := queue(t, ts, "rs/a", longLease, 2) // behind the pending waiter

	h2 := resume(t, ts, hc)
	expectResumed(t, h2, hc, 0)
	w2 := resume(t, ts, wc)
	expectResumed(t, w2, wc, 1)
	expectQueued(t, late, 2)
	expectHolds(t, h2, hc.ID)

	h2.Conn.Close()
	f := w2.ReadFrame(frameWait)
	if f.Type != wire.TypeAcquired || !f.Push || !f.WithCredential || f.Token <= hc.ID {
		t.Fatalf("got %v, want the push with a credential and a token above %d", f, hc.ID)
	}
	expectQueued(t, late, 1)
	reg := ts.Srv.Registry()
	for labels, want := range map[string]float64{"how=pending,kind=holder": 1, "how=pending,kind=waiter": 1} {
		if got := metric(t, reg, "baton_resumes_total", labels); got != want {
			t.Errorf("baton_resumes_total{%s} = %v, want %v", labels, got, want)
		}
	}
	if got := metric(t, reg, "baton_claims_pending", ""); got != 0 {
		t.Errorf("baton_claims_pending = %v, want 0 once both came back", got)
	}
	// Every listed claim accounted for: the list is dropped.
	batontest.Eventually(t, frameWait, func() bool {
		_, err := os.Stat(filepath.Join(ts.DataDir, "resume-list"))
		return os.IsNotExist(err)
	}, "resume-list still there once every listed claim came back")
}

// TestListedHolderBlocksOnlyItsName: a listed holder that never comes back
// keeps its name for its time left after the restart, and no longer; a
// name without a listed claim grants at once.
func TestListedHolderBlocksOnlyItsName(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	ts := batontest.StartServer(t)
	h, _ := v3Hold(t, ts, "rs/gone", lease)
	listedAt := time.Now()
	restart(t, ts, h)
	started := time.Now()

	other, _ := hold(t, ts, "rs/other", longLease) // no listed claim: at once
	other.Conn.Close()
	w := queue(t, ts, "rs/gone", longLease, 1)
	tok := expectPush(t, w, lease+frameWait)
	waited := time.Since(started)
	// The holder's time left is its lease less its silence when it was
	// listed, which is less than the time from its ACQUIRE to the restart.
	if min := lease - started.Sub(listedAt); waited < min-100*time.Millisecond {
		t.Fatalf("the name was granted %v after the start, want no sooner than the listed holder's time left (%v)", waited, min)
	}
	expectHolds(t, w, tok)
	eventuallyMetric(t, ts.Srv.Registry(), "baton_pending_claims_lost_total", "", 1)
}

// TestBrokenConnectionHolderKeepsSlot: a holder of version 3 with a
// credential ended for a frame that breaks the protocol keeps its slot
// until its lease runs out (its client may not have learnt of the end),
// and its resume is refused; one of version 2 hands over at once
// (TestProtocolErrorOfHolderHandsOver).
func TestBrokenConnectionHolderKeepsSlot(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	ts := batontest.StartServer(t)
	h, hc := v3Hold(t, ts, "rs/broken", lease)
	w := queue(t, ts, "rs/broken", longLease, 1)
	lastSeen := time.Now()
	h.Write([]byte{byte(wire.TypeHeartbeat), 0, 1, 0}) // a HEARTBEAT with a payload
	expectError(t, h, wire.CodeProtocol)

	r := resume(t, ts, hc)
	expectError(t, r, wire.CodeResumeRefused)
	tok := expectPush(t, w, lease+frameWait)
	if d := time.Since(lastSeen); d < lease-100*time.Millisecond {
		t.Fatalf("the slot was given on %v after the holder's last frame, want no sooner than its lease %v", d, lease)
	}
	if tok <= hc.ID {
		t.Fatalf("push token %d, want above %d", tok, hc.ID)
	}
}

// TestWriteTimeoutResetsVersion3: a session of version 3 whose write times
// out is reset, so that its client does not take a clean end for its
// server going away (and resume); one of version 2 is closed, as before.
// The client sends a heartbeat only once the server has read the one
// before and written its reply, so that nothing it sent is unread when
// the write times out (unread bytes would make any close a reset).
func TestWriteTimeoutResetsVersion3(t *testing.T) {
	t.Parallel()
	for _, v3 := range []bool{true, false} {
		ts := batontest.StartServer(t, ioTimeout(time.Second), func(c *server.Config) { c.SendBuffer = 4096 })
		reg := ts.Srv.Registry()
		stuck := dialSmallBuffer(t, ts)
		if v3 {
			stuck.AcquireV3("rs/stuck", longLease, false, 1, false, "stuck")
		} else {
			stuck.AcquireV2("rs/stuck", longLease, false, 1, false, "stuck")
		}
		expectAcquired(t, stuck)
		batontest.Eventually(t, frameWait, func() bool { return metric(t, reg, "baton_connections_parked", "") == 1 }, "the session never parked")
		base := metric(t, reg, "baton_heartbeats_total", "")
		// Far from the buffers' room (about 700 replies), in batches;
		// then one at a time.
		const batch, quick = 50, 450
		for n := batch; n <= quick; n += batch {
			stuck.Write(heartbeats(batch))
			batontest.Eventually(t, frameWait, func() bool { return metric(t, reg, "baton_heartbeats_total", "") == base+float64(n) }, "heartbeats not read")
		}
		for n := quick + 1; ; n++ {
			if n > 100000 {
				t.Fatal("the server's writes never stalled")
			}
			stuck.Heartbeat()
			batontest.Eventually(t, frameWait, func() bool { return metric(t, reg, "baton_heartbeats_total", "") == base+float64(n) }, "heartbeat %d not read", n)
			// A reply the socket could not take goes to a writer: the
			// session is no longer parked.
			blocked := false
			for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end) && !blocked; time.Sleep(2 * time.Millisecond) {
				blocked = metric(t, reg, "baton_connections_parked", "") == 0
			}
			if blocked {
				t.Logf("version 3 %v: the write stalled after %d replies", v3, n)
				break
			}
		}
		eventuallyMetric(t, reg, "baton_sessions_ended_total", "reason=write_timeout", 1)
		var err error
		buf := make([]byte, 64<<10)
		stuck.Conn.SetReadDeadline(time.Now().Add(frameWait))
		for err == nil {
			_, err = stuck.Conn.Read(buf)
		}
		if reset := errors.Is(err, syscall.ECONNRESET); reset != v3 {
			t.Fatalf("version 3 %v: the connection ended with %v, want a reset %v", v3, err, v3)
		}
	}
}

// TestOperatorReleaseRecorded: an operator's release of a holder of
// version 3 is recorded in the data directory (revoked) before the claim
// is ended; the holder is told FORCE_RELEASED and its resume is refused.
func TestOperatorReleaseRecorded(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	h, hc := v3Hold(t, ts, "rs/released", longLease)
	w, wc := v3Queue(t, ts, "rs/released", longLease, 1)
	if _, err := ts.Srv.ForceReleaseAll("rs/released"); err != nil {
		t.Fatal(err)
	}
	expectError(t, h, wire.CodeForceReleased)
	f := w.ReadFrame(frameWait)
	if f.Type != wire.TypeAcquired || !f.Push || !f.WithCredential {
		t.Fatalf("got %v, want the push with a credential", f)
	}
	b, err := os.ReadFile(filepath.Join(ts.DataDir, "revoked"))
	if err != nil || len(b) == 0 {
		t.Fatalf("revoked: %d bytes, %v; want the record of the release", len(b), err)
	}
	if fi, _ := os.Stat(filepath.Join(ts.DataDir, "revoked")); fi.Mode().Perm() != 0o600 {
		t.Errorf("revoked has mode %v, want 0600", fi.Mode().Perm())
	}
	r := resume(t, ts, hc)
	expectError(t, r, wire.CodeForceReleased)

	// A kick of a waiter of version 3 is recorded too.
	w2, w2c := v3Queue(t, ts, "rs/released", longLease, 1)
	vs, err := ts.Srv.Kick(sessionOf(t, ts, "rs/released", w2c))
	if err != nil {
		t.Fatalf("kick: %v (%v)", err, vs)
	}
	expectError(t, w2, wire.CodeKicked)
	r2 := resume(t, ts, w2c)
	expectError(t, r2, wire.CodeKicked)
	_ = wc
}

// sessionOf is the id of the waiter of name whose ticket is cl's.
func sessionOf(t *testing.T, ts *batontest.Server, name string, cl *batontest.Claim) string {
	t.Helper()
	lv, ok := ts.Srv.Lock(name)
	if !ok || len(lv.Waiters) == 0 {
		t.Fatalf("lock %q has no waiter", name)
	}
	return lv.Waiters[len(lv.Waiters)-1].ID
}

// TestResumeInCrashGrace: after a stop that is not clean (no list, no
// mark), the next start's grace takes back the claims of the run before:
// the holder keeps its token, the waiter its place; once the grace is
// over, a resume of a claim of the run before is refused.
func TestResumeInCrashGrace(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	ts := batontest.StartServer(t, batontest.DurableLeases)
	h, hc := v3Hold(t, ts, "rs/crash", lease)
	w, wc := v3Queue(t, ts, "rs/crash", lease, 1)
	_, late := v3Hold(t, ts, "rs/late", lease)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ts.Crash(t)
	}()
	for _, c := range []*batontest.Conn{h, w} {
		c.ReadFrame(frameWait) // SHUTDOWN, which a crash would not send
		c.Conn.Close()
	}
	waitChan(t, stopped, 15*time.Second, "the stop did not end")
	ts.Start(t)
	if ts.Srv.GraceRemaining() == 0 {
		t.Fatal("no crash grace after a stop that was not clean")
	}
	h2 := resume(t, ts, hc)
	expectResumed(t, h2, hc, 0)
	w2 := resume(t, ts, wc)
	expectResumed(t, w2, wc, 1)
	// Keep them alive through the grace.
	end := time.Now().Add(ts.Srv.GraceRemaining() + 200*time.Millisecond)
	for time.Now().Before(end) {
		expectHolds(t, h2, hc.ID)
		expectQueued(t, w2, 1)
		time.Sleep(200 * time.Millisecond)
	}
	r := resume(t, ts, late)
	expectError(t, r, wire.CodeResumeRefused)
	if got := metric(t, ts.Srv.Registry(), "baton_resumes_total", "how=grace,kind=holder"); got != 1 {
		t.Errorf("baton_resumes_total{kind=holder,how=grace} = %v, want 1", got)
	}
}

var _ = server.ErrHandingOver

// TestResumeBoundToClientKey: under mutual TLS a credential works only
// for the key of the certificate it was given to: a client with another
// key (the same identity) gets BAD_CREDENTIAL and the claim stays; a
// renewed certificate with the same key resumes it.
func TestResumeBoundToClientKey(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca})
	mine := ca.Client(t, "worker")
	theirs := ca.Client(t, "worker") // the same name, another key
	renewed := ca.Issue(t, testcerts.Spec{CN: "worker", Key: mine.TLS.PrivateKey.(*ecdsa.PrivateKey)})

	c, err := dialTLS(t, s.ts.Addr, s.clientConfig(mine))
	if err != nil {
		t.Fatal(err)
	}
	c.AcquireV3("rs/mtls", longLease, false, 1, false, "")
	cl := &batontest.Claim{Name: "rs/mtls", Lease: longLease, Limit: 1}
	if f := c.ReadFrame(frameWait); !cl.Update(f) {
		t.Fatalf("got %v, want ACQUIRED with a credential", f)
	}
	other, err := dialTLS(t, s.ts.Addr, s.clientConfig(theirs))
	if err != nil {
		t.Fatal(err)
	}
	other.Write(cl.ResumeFrame(t, ""))
	expectError(t, other, wire.CodeBadCredential)
	expectHolds(t, c, cl.ID)

	plain := batontest.Dial(t, s.ts.Addr) // no TLS at all: refused before any frame
	plain.Write(cl.ResumeFrame(t, ""))
	expectError(t, plain, wire.CodeUnauthorized)

	again, err := dialTLS(t, s.ts.Addr, s.clientConfig(renewed))
	if err != nil {
		t.Fatal(err)
	}
	again.Write(cl.ResumeFrame(t, ""))
	expectResumed(t, again, cl, 0)
	expectError(t, c, wire.CodeMoved)
}

// TestConflictHigherTokenWins: after a crash, two resumed claims of one
// exclusive name (possible only when a client breaks the rules: here one
// resumes a claim it released) cannot both hold: the higher token wins, in
// whichever order they come back; the loser is recorded before it is told
// SUPERSEDED on its connection, or as the answer to its resume.
func TestConflictHigherTokenWins(t *testing.T) {
	t.Parallel()
	const lease = 5 * time.Second
	for _, olderFirst := range []bool{true, false} {
		ts := batontest.StartServer(t, batontest.DurableLeases)
		a, ac := v3Hold(t, ts, "rs/conflict", lease)
		a.Conn.Close() // the release, which a rule-breaking client then resumes
		var b *batontest.Conn
		var bc *batontest.Claim
		batontest.Eventually(t, frameWait, func() bool { _, held := ts.Srv.Lock("rs/conflict"); return !held }, "the release was not seen")
		b, bc = v3Hold(t, ts, "rs/conflict", lease)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			ts.Crash(t)
		}()
		b.ReadFrame(frameWait)
		b.Conn.Close()
		waitChan(t, stopped, 15*time.Second, "the stop did not end")
		ts.Start(t)

		if olderFirst {
			a2 := resume(t, ts, ac)
			expectResumed(t, a2, ac, 0)
			b2 := resume(t, ts, bc)
			expectResumed(t, b2, bc, 0)
			expectError(t, a2, wire.CodeSuperseded)
			expectHolds(t, b2, bc.ID)
		} else {
			b2 := resume(t, ts, bc)
			expectResumed(t, b2, bc, 0)
			a2 := resume(t, ts, ac)
			expectError(t, a2, wire.CodeSuperseded)
			expectHolds(t, b2, bc.ID)
		}
		// Recorded: not taken back again.
		b3, err := os.ReadFile(filepath.Join(ts.DataDir, "revoked"))
		if err != nil || len(b3) == 0 {
			t.Fatalf("olderFirst %v: revoked: %d bytes, %v; want the loser's record", olderFirst, len(b3), err)
		}
		a3 := resume(t, ts, ac)
		expectError(t, a3, wire.CodeSuperseded)
		if bc.ID <= ac.ID {
			t.Fatalf("the winner's token %d is not above the loser's %d", bc.ID, ac.ID)
		}
	}
}

// fastRotation is a ResumeSource whose generations last period.
type fastRotation struct {
	server.ResumeSource
	period time.Duration
}

func (f fastRotation) GenerationPeriod() time.Duration { return f.period }

// TestGenerationsRotate: the server starts a new generation every period
// of serving, none during its crash grace; the first heartbeat reply of a
// claim after one carries a fresh credential, and a credential two
// generations old no longer resumes.
func TestGenerationsRotate(t *testing.T) {
	t.Parallel()
	const period = 300 * time.Millisecond
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.Resume = fastRotation{c.Resume, period}
		c.NoGrantFor = 4 * period // a grace: no generation starts in it
	})
	_, gen0 := ts.Store.ResumeKey()
	time.Sleep(2 * period)
	if _, gen := ts.Store.ResumeKey(); gen != gen0 {
		t.Fatalf("generation %d during the grace, want %d: none starts in a grace", gen, gen0)
	}
	h := batontest.Dial(t, ts.Addr)
	h.AcquireV3("rs/rotate", longLease, false, 1, false, "")
	hc := &batontest.Claim{Name: "rs/rotate", Lease: longLease, Limit: 1}
	if f := h.ReadFrame(frameWait); f.Type != wire.TypeWaiting || !hc.Update(f) {
		t.Fatalf("got %v, want WAITING with a ticket in the grace", f)
	}
	if f := h.ReadFrame(frameWait); f.Type != wire.TypeAcquired || !f.Push || !hc.Update(f) {
		t.Fatalf("got %v, want the push with a credential at the grace's end", f)
	}
	old := *hc
	// Heartbeats, as a client sends them, until a reply brings the
	// credential of a generation two after the claim's first.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(period / 3) {
		h.Heartbeat()
		f := h.ReadFrame(frameWait)
		if f.Type != wire.TypeAcquired || f.Token != hc.ID {
			t.Fatalf("heartbeat reply %v, want ACQUIRED %d", f, hc.ID)
		}
		if f.WithCredential {
			if f.Generation <= hc.Generation {
				t.Fatalf("a fresh credential of generation %d after %d", f.Generation, hc.Generation)
			}
			hc.Update(f)
		}
		if hc.Generation >= old.Generation+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no credential two generations after %d", old.Generation)
		}
	}
	r := resume(t, ts, &old)
	expectError(t, r, wire.CodeResumeRefused)
	r2 := resume(t, ts, hc)
	expectResumed(t, r2, hc, 0)
}

// crashRestart stops ts as a crash leaves its data directory (its
// sessions, told SHUTDOWN meanwhile, close) and starts it again.
func crashRestart(t *testing.T, ts *batontest.Server, conns ...*batontest.Conn) {
	t.Helper()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ts.Crash(t)
	}()
	for _, c := range conns {
		c.ReadFrame(frameWait)
		c.Conn.Close()
	}
	waitChan(t, stopped, 15*time.Second, "the stop did not end")
	ts.Start(t)
}

// TestReleaseRecordSurvivesCrash: an operator's release of a holder of
// version 3 is recorded: after a crash, the next start's grace does not
// take the claim back, though a fresh table knows nothing of it; a claim
// of the same run that was not released comes back.
func TestReleaseRecordSurvivesCrash(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, batontest.DurableLeases)
	r, rc := v3Hold(t, ts, "rs/rec", longLease)
	k, kc := v3Hold(t, ts, "rs/kept", longLease)
	if _, err := ts.Srv.ForceReleaseAll("rs/rec"); err != nil {
		t.Fatal(err)
	}
	expectError(t, r, wire.CodeForceReleased)
	crashRestart(t, ts, k)
	r2 := resume(t, ts, rc)
	expectError(t, r2, wire.CodeResumeRefused)
	k2 := resume(t, ts, kc)
	expectResumed(t, k2, kc, 0)
}

// TestCrashAfterPlannedStartKeepsList: a start that crashed before the
// claims of the list it took over were back leaves the list: the next
// start (a crash grace) takes the listed claims back, and refuses a claim
// of the listed run that the list did not hold (it had ended before the
// stop), though the grace would take back a claim of an earlier run.
func TestCrashAfterPlannedStartKeepsList(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, batontest.DurableLeases)
	h, hc := v3Hold(t, ts, "rs/listed", longLease)
	g, gc := v3Hold(t, ts, "rs/gone", longLease)
	g.Conn.Close() // released before the stop: not listed
	batontest.Eventually(t, frameWait, func() bool { _, held := ts.Srv.Lock("rs/gone"); return !held }, "the release was not seen")
	restart(t, ts, h) // planned: the list holds rs/listed
	crashRestart(t, ts)
	if ts.Srv.GraceRemaining() == 0 {
		t.Fatal("no crash grace")
	}
	g2 := resume(t, ts, gc)
	expectError(t, g2, wire.CodeResumeRefused)
	h2 := resume(t, ts, hc)
	expectResumed(t, h2, hc, 0)
}
