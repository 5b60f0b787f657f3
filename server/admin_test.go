package server_test

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// timed is a session with the times that bound what the server can know
// of it: its last frame was received after lastSent and before lastReply.
type timed struct {
	c                   *batontest.Conn
	lastSent, lastReply time.Time
}

func acquireTimed(t *testing.T, ts *batontest.Server, name string, lease time.Duration, owner string) (*timed, batontest.Frame) {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	s := &timed{c: c, lastSent: time.Now()}
	c.Acquire(name, lease, false, owner)
	f := c.ReadFrame(frameWait)
	s.lastReply = time.Now()
	return s, f
}

func (s *timed) heartbeat(t *testing.T) batontest.Frame {
	t.Helper()
	s.lastSent = time.Now()
	s.c.Heartbeat()
	f := s.c.ReadFrame(frameWait)
	s.lastReply = time.Now()
	return f
}

// checkSilent checks v.Silent against what the client knows: the view was
// taken between q0 and q1.
func checkSilent(t *testing.T, v server.SessionView, s *timed, q0, q1 time.Time) {
	t.Helper()
	if lo, hi := q0.Sub(s.lastReply), q1.Sub(s.lastSent); v.Silent < lo || v.Silent > hi {
		t.Errorf("session %s: silent %v, want between %v and %v", v.ID, v.Silent, lo, hi)
	}
}

// TestAdminViews checks Locks and Lock: holder, waiters in queue order,
// owner, remote, lease, token for the holder only, and since/silent within
// what the client can tell.
func TestAdminViews(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	if got := ts.Srv.Locks(); len(got) != 0 {
		t.Fatalf("Locks() on an idle server = %+v, want none", got)
	}
	if _, ok := ts.Srv.Lock("views"); ok {
		t.Fatal("Lock(views) found on an idle server")
	}

	h, f := acquireTimed(t, ts, "views", 2*time.Second, "alice:1")
	if f.Type != wire.TypeAcquired {
		t.Fatalf("holder got %v", f)
	}
	tok := f.Token
	granted, grantedBy := h.lastSent, h.lastReply // the grant happened in between
	w1, _ := acquireTimed(t, ts, "views", 3*time.Second, "bob:2")
	w2, _ := acquireTimed(t, ts, "views", 4*time.Second, "")
	hold(t, ts, "a-first-by-name", longLease)
	time.Sleep(20 * time.Millisecond) // some silence to measure
	h.heartbeat(t)

	q0 := time.Now()
	lv, ok := ts.Srv.Lock("views")
	q1 := time.Now()
	if !ok {
		t.Fatal("Lock(views) not found")
	}
	if lv.Name != "views" || lv.Holder == nil || len(lv.Waiters) != 2 {
		t.Fatalf("Lock(views) = %+v, want a holder and 2 waiters", lv)
	}
	hv := *lv.Holder
	want := []struct {
		v     server.SessionView
		s     *timed
		owner string
		lease time.Duration
		held  bool
	}{
		{hv, h, "alice:1", 2 * time.Second, true},
		{lv.Waiters[0], w1, "bob:2", 3 * time.Second, false},
		{lv.Waiters[1], w2, "", 4 * time.Second, false},
	}
	ids := map[string]bool{}
	for i, w := range want {
		v := w.v
		if v.ID == "" || ids[v.ID] {
			t.Errorf("session %d: id %q empty or repeated", i, v.ID)
		}
		ids[v.ID] = true
		if v.Remote != w.s.c.Conn.LocalAddr().String() {
			t.Errorf("session %d: remote %q, want %q", i, v.Remote, w.s.c.Conn.LocalAddr())
		}
		if v.Owner != w.owner || v.Lease != w.lease || v.Held != w.held {
			t.Errorf("session %d: owner %q lease %v held %v, want %q %v %v", i, v.Owner, v.Lease, v.Held, w.owner, w.lease, w.held)
		}
		if w.held && v.Token != tok {
			t.Errorf("holder token %d, want %d", v.Token, tok)
		}
		if !w.held && v.Token != 0 {
			t.Errorf("waiter %d has token %d, want 0", i, v.Token)
		}
		checkSilent(t, v, w.s, q0, q1)
		if v.Since < v.Silent {
			t.Errorf("session %d: since %v < silent %v", i, v.Since, v.Silent)
		}
	}
	if lo, hi := q0.Sub(grantedBy), q1.Sub(granted); hv.Since < lo || hv.Since > hi {
		t.Errorf("holder since %v, want between %v and %v", hv.Since, lo, hi)
	}

	all := ts.Srv.Locks()
	if len(all) != 2 || all[0].Name != "a-first-by-name" || all[1].Name != "views" {
		t.Fatalf("Locks() = %+v, want a-first-by-name and views, sorted", all)
	}
	if all[1].Holder == nil || all[1].Holder.ID != hv.ID || all[1].Waiters[0].ID != lv.Waiters[0].ID || all[1].Waiters[1].ID != lv.Waiters[1].ID {
		t.Fatalf("Locks()[1] = %+v, want the same sessions as Lock(views)", all[1])
	}

	// After a promotion, since counts from the grant, which came after the
	// close (and 20ms after the new holder's ACQUIRE).
	closed := time.Now()
	h.c.Conn.Close()
	expectPush(t, w1.c, frameWait)
	pushed := time.Now()
	q0 = time.Now()
	lv, _ = ts.Srv.Lock("views")
	q1 = time.Now()
	if lv.Holder == nil || lv.Holder.ID != want[1].v.ID || lv.Holder.Token == 0 || len(lv.Waiters) != 1 || lv.Waiters[0].ID != want[2].v.ID {
		t.Fatalf("after the handover Lock(views) = %+v, want bob holding and one waiter", lv)
	}
	if lo, hi := q0.Sub(pushed), q1.Sub(closed); lv.Holder.Since < lo || lv.Holder.Since > hi {
		t.Errorf("new holder's since %v, want between %v and %v (from its grant)", lv.Holder.Since, lo, hi)
	}
}

// TestAdminForceRelease: the holder gets FORCE_RELEASED, the next waiter is
// pushed at once; ErrNotHeld when nobody holds the lock.
func TestAdminForceRelease(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	if _, err := ts.Srv.ForceRelease("nobody"); !errors.Is(err, server.ErrNotHeld) {
		t.Fatalf("ForceRelease(nobody) error %v, want ErrNotHeld", err)
	}
	h := batontest.Dial(t, ts.Addr)
	h.Acquire("fr", longLease, false, "victim")
	tok := expectAcquired(t, h)
	w := queue(t, ts, "fr", longLease, 1)
	before, _ := ts.Srv.Lock("fr")

	v, err := ts.Srv.ForceRelease("fr")
	if err != nil {
		t.Fatalf("ForceRelease(fr): %v", err)
	}
	if v.ID != before.Holder.ID || v.Owner != "victim" || !v.Held || v.Token != tok || v.Remote != h.Conn.LocalAddr().String() {
		t.Fatalf("ForceRelease returned %+v, want the holder %+v", v, *before.Holder)
	}
	expectError(t, h, wire.CodeForceReleased)
	tok2 := expectPush(t, w, frameWait)
	if tok2 <= tok {
		t.Fatalf("push token %d, want > %d", tok2, tok)
	}
	expectHolds(t, w, tok2)

	// Without a waiter, the lock is simply gone.
	if _, err := ts.Srv.ForceRelease("fr"); err != nil {
		t.Fatalf("second ForceRelease(fr): %v", err)
	}
	expectError(t, w, wire.CodeForceReleased)
	if lv, ok := ts.Srv.Lock("fr"); ok {
		t.Fatalf("Lock(fr) = %+v after its only session was force-released", lv)
	}
	if _, err := ts.Srv.ForceRelease("fr"); !errors.Is(err, server.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free lock: error %v, want ErrNotHeld", err)
	}
}

// TestAdminKick: a waiter gets KICKED and the queue moves up; a holder
// cannot be kicked (ErrHolder); bad or unknown ids give ErrUnknownSession.
func TestAdminKick(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	h, tok := hold(t, ts, "kick", longLease)
	w1 := queue(t, ts, "kick", longLease, 1)
	w2 := batontest.Dial(t, ts.Addr)
	w2.Acquire("kick", longLease, false, "kickme")
	expectWaiting(t, w2, 2)
	w3 := queue(t, ts, "kick", longLease, 3)
	lv, _ := ts.Srv.Lock("kick")

	v, err := ts.Srv.Kick(lv.Waiters[1].ID)
	if err != nil {
		t.Fatalf("Kick: %v", err)
	}
	if v.ID != lv.Waiters[1].ID || v.Owner != "kickme" || v.Held || v.Token != 0 || v.Remote != w2.Conn.LocalAddr().String() {
		t.Fatalf("Kick returned %+v, want the waiter %+v", v, lv.Waiters[1])
	}
	expectError(t, w2, wire.CodeKicked)
	expectQueued(t, w3, 2)
	expectQueued(t, w1, 1)

	if _, err := ts.Srv.Kick(lv.Holder.ID); !errors.Is(err, server.ErrHolder) {
		t.Fatalf("Kick(holder) error %v, want ErrHolder", err)
	}
	expectHolds(t, h, tok)
	for _, id := range []string{lv.Waiters[1].ID, "", "abc", "-1", "0", "1.5", " 1", "18446744073709551615", "99999999999999999999"} {
		if _, err := ts.Srv.Kick(id); !errors.Is(err, server.ErrUnknownSession) {
			t.Errorf("Kick(%q) error %v, want ErrUnknownSession", id, err)
		}
	}

	h.Conn.Close()
	tok1 := expectPush(t, w1, frameWait)
	if tok1 <= tok {
		t.Fatalf("push token %d, want > %d", tok1, tok)
	}
	expectQueued(t, w3, 1)
}
