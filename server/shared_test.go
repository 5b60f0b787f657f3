package server_test

import (
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// Protocol version 2 against the server: semaphores and read/write locks.
// The conversations of the shared vectors file are played by
// vectors_json_test.go; these tests cover what they cannot say.

// holdShared connects and takes a slot of name (limit), which must be free.
func holdShared(t *testing.T, ts *batontest.Server, name string, limit uint16) (*batontest.Conn, uint64) {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.AcquireV2(name, longLease, true, limit, false, "test:"+name)
	return c, expectAcquired(t, c)
}

// queueShared connects and queues a shared claim of name at pos.
func queueShared(t *testing.T, ts *batontest.Server, name string, limit uint16, pos uint32) *batontest.Conn {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.AcquireV2(name, longLease, true, limit, false, "test:"+name)
	expectWaiting(t, c, pos)
	return c
}

// bothPaths runs f against a server with the idle poller on and off: the
// poller's shard serves parked sessions itself (their ACQUIRE, heartbeats,
// close and the handover's pushes), a reader goroutine serves the others.
func bothPaths(t *testing.T, f func(t *testing.T, ts *batontest.Server)) {
	for _, park := range []bool{true, false} {
		t.Run("park="+strconv.FormatBool(park), func(t *testing.T) {
			t.Parallel()
			f(t, batontest.StartServer(t, func(c *server.Config) { c.ParkIdle = park }))
		})
	}
}

// TestSeveralPushesInQueueOrder: when an exclusive holder leaves and
// shared waiters stand at the head, each gets its push, in queue order,
// with tokens rising in that order; the exclusive waiter behind them
// waits, and so does the shared one behind it (nobody overtakes).
func TestSeveralPushesInQueueOrder(t *testing.T) {
	t.Parallel()
	bothPaths(t, func(t *testing.T, ts *batontest.Server) {
		w, tok := hold(t, ts, "rw", longLease)
		readers := []*batontest.Conn{
			queueShared(t, ts, "rw", 3, 1),
			queueShared(t, ts, "rw", 3, 2),
			queueShared(t, ts, "rw", 3, 3),
		}
		writer := queue(t, ts, "rw", longLease, 4)
		late := queueShared(t, ts, "rw", 3, 5)
		w.Conn.Close()
		last := tok
		for i, r := range readers {
			got := expectPush(t, r, frameWait)
			if got <= last {
				t.Fatalf("reader %d: push token %d, want more than %d (rising in queue order)", i, got, last)
			}
			last = got
		}
		expectQueued(t, writer, 1)
		expectQueued(t, late, 2)
		lv, _ := ts.Srv.Lock("rw")
		if len(lv.Holders) != 3 || lv.Limit != 3 || !lv.Holders[0].Shared || lv.Holder.ID != lv.Holders[0].ID {
			t.Fatalf("Lock: got %+v, want three shared holders and limit 3", lv)
		}
		// The readers leave one by one; the writer is granted with the
		// last, and the reader behind it only when it leaves.
		readers[0].Conn.Close()
		readers[1].Conn.Close()
		expectQueued(t, writer, 1)
		readers[2].Conn.Close()
		wtok := expectPush(t, writer, frameWait)
		expectQueued(t, late, 1)
		writer.Conn.Close()
		if got := expectPush(t, late, frameWait); got <= wtok {
			t.Fatalf("late reader: token %d, want more than the writer's %d", got, wtok)
		}
	})
}

// TestLimitMismatch: the message is exactly the limit in force, in
// decimal; the check comes before BUSY; exclusive claims neither set nor
// check the limit; a refused claim sets nothing; once the last shared
// session ends, the next shared claim sets the limit anew.
func TestLimitMismatch(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	reg := ts.Srv.Registry()
	h, _ := holdShared(t, ts, "m", 12)
	for _, nowait := range []bool{false, true} {
		c := batontest.Dial(t, ts.Addr)
		c.AcquireV2("m", longLease, true, 7, nowait, "")
		if e := expectError(t, c, wire.CodeLimitMismatch); e.Msg != "12" {
			t.Fatalf("LIMIT_MISMATCH message %q, want exactly %q", e.Msg, "12")
		}
	}
	// An exclusive claim (v1, or v2 with limit 1) is not checked: it waits.
	x := queue(t, ts, "m", longLease, 1)
	x2 := batontest.Dial(t, ts.Addr)
	x2.AcquireV2("m", longLease, false, 1, false, "")
	expectWaiting(t, x2, 2)
	// The shared holder leaves; the exclusive claims take their turns, and
	// no shared session is left: a NOWAIT shared claim with another limit
	// is refused BUSY (the name is held), and sets nothing.
	h.Conn.Close()
	expectPush(t, x, frameWait)
	busy := batontest.Dial(t, ts.Addr)
	busy.AcquireV2("m", longLease, true, 3, true, "")
	if e := expectError(t, busy, wire.CodeBusy); e.Msg != `lock "m" is held by an exclusive claim` {
		t.Fatalf("BUSY message %q", e.Msg)
	}
	// The next shared claim sets the limit anew.
	q := queueShared(t, ts, "m", 5, 2)
	again := batontest.Dial(t, ts.Addr)
	again.AcquireV2("m", longLease, true, 12, false, "")
	if e := expectError(t, again, wire.CodeLimitMismatch); e.Msg != "5" {
		t.Fatalf("LIMIT_MISMATCH message %q, want %q", e.Msg, "5")
	}
	expectQueued(t, q, 2)
	eventuallyMetric(t, reg, "baton_protocol_errors_total", "code=LIMIT_MISMATCH", 3)
	eventuallyMetric(t, reg, "baton_sessions_ended_total", "reason=limit_mismatch", 3)
}

// TestOneHolderExpires: a shared holder silent for its lease ends alone;
// the others hold on, and the slot goes to the head of the queue at once.
func TestOneHolderExpires(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	a, atok := holdShared(t, ts, "e", 2)
	silent := batontest.Dial(t, ts.Addr)
	silent.AcquireV2("e", 300*time.Millisecond, true, 2, false, "")
	expectAcquired(t, silent)
	w := queueShared(t, ts, "e", 2, 1)
	expectErrorWithin(t, silent, wire.CodeLeaseExpired, frameWait)
	wtok := expectPush(t, w, frameWait)
	expectHolds(t, a, atok)
	expectHolds(t, w, wtok)
}

// TestForceReleaseOfSeveralHolders: a name's release ends every holder
// (each told FORCE_RELEASED, each with its own force_released event), then
// the queue moves once; ReleaseSession ends one holder alone; a waiter is
// refused (kick it), and kicking an exclusive waiter at the head lets the
// readers behind it in.
func TestForceReleaseOfSeveralHolders(t *testing.T) {
	t.Parallel()
	bothPaths(t, func(t *testing.T, ts *batontest.Server) {
		sub := ts.Srv.Subscribe(server.SubscribeRequest{Lock: "f"}).Sub
		defer sub.Close()
		var holders []*batontest.Conn
		for range 3 {
			c, _ := holdShared(t, ts, "f", 3)
			holders = append(holders, c)
		}
		writer := queue(t, ts, "f", longLease, 1)
		reader := queueShared(t, ts, "f", 3, 2)
		before, _ := ts.Srv.Lock("f")

		// One holder alone, by its session: the writer still waits.
		v, err := ts.Srv.ReleaseSession(before.Holders[1].ID)
		if err != nil || v.ID != before.Holders[1].ID || !v.Shared || !v.Held {
			t.Fatalf("ReleaseSession: got %+v, %v, want holder %s", v, err, before.Holders[1].ID)
		}
		expectError(t, holders[1], wire.CodeForceReleased)
		expectQueued(t, writer, 1)
		if _, err := ts.Srv.ReleaseSession(before.Waiters[0].ID); !errors.Is(err, server.ErrWaiter) {
			t.Fatalf("ReleaseSession of a waiter: got %v, want ErrWaiter", err)
		}
		if _, err := ts.Srv.ReleaseSession("999999"); !errors.Is(err, server.ErrUnknownSession) {
			t.Fatalf("ReleaseSession of nobody: got %v, want ErrUnknownSession", err)
		}

		// Every holder: both left are ended, in grant order, then the
		// writer is granted.
		ended, err := ts.Srv.ForceReleaseAll("f")
		if err != nil || len(ended) != 2 || ended[0].ID != before.Holders[0].ID || ended[1].ID != before.Holders[2].ID {
			t.Fatalf("ForceReleaseAll: got %+v, %v, want holders %s and %s", ended, err, before.Holders[0].ID, before.Holders[2].ID)
		}
		expectError(t, holders[0], wire.CodeForceReleased)
		expectError(t, holders[2], wire.CodeForceReleased)
		expectPush(t, writer, frameWait)
		expectQueued(t, reader, 1)
		var released []string
		for _, e := range readAll(t, sub) {
			if e.Type == server.EventForceReleased {
				released = append(released, e.Session.ID)
			}
		}
		want := []string{before.Holders[1].ID, before.Holders[0].ID, before.Holders[2].ID}
		if !slices.Equal(released, want) {
			t.Fatalf("force_released events of sessions %v, want %v", released, want)
		}

		// A writer waiting at the head, kicked, lets the readers in.
		second := queue(t, ts, "f", longLease, 2)
		r2 := queueShared(t, ts, "f", 3, 3)
		ts.Srv.ForceRelease("f")
		expectPush(t, reader, frameWait)
		expectQueued(t, second, 1)
		lv, _ := ts.Srv.Lock("f")
		if _, err := ts.Srv.Kick(lv.Waiters[0].ID); err != nil {
			t.Fatal(err)
		}
		expectError(t, second, wire.CodeKicked)
		expectPush(t, r2, frameWait)
	})
}

// TestNoPushWithoutLeaderLease: a replicated leader whose lease ran out
// grants nothing, not one of the several pushes a release would make:
// every waiter hears NOT_LEADER, never ACQUIRED.
func TestNoPushWithoutLeaderLease(t *testing.T) {
	t.Parallel()
	for _, park := range []bool{false, true} {
		t.Run("park="+strconv.FormatBool(park), func(t *testing.T) {
			t.Parallel()
			var may atomic.Bool
			var lost atomic.Int32
			ts := leaderServer(t, park, &may, &lost)
			h, _ := hold(t, ts, "jobs", longLease)
			readers := []*batontest.Conn{queueShared(t, ts, "jobs", 4, 1), queueShared(t, ts, "jobs", 4, 2), queueShared(t, ts, "jobs", 4, 3)}
			may.Store(false)
			h.Conn.Close()
			for i, r := range readers {
				if f := r.ReadFrame(frameWait); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
					t.Fatalf("reader %d after the lease ran out: got %v, want ERROR NOT_LEADER, never ACQUIRED", i, f)
				}
			}
			batontest.Eventually(t, frameWait, func() bool { return lost.Load() == 1 }, "TermLost called %d times, want 1", lost.Load())
		})
	}
}

// TestSharedClaimMetrics: grants are counted by claim; with -metrics-lock-names
// each published name shows its holders and limit, and without it no name
// appears.
func TestSharedClaimMetrics(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, func(c *server.Config) { c.MetricsLockNames = 2 })
	reg := ts.Srv.Registry()
	hold(t, ts, "mutex", longLease)
	holdShared(t, ts, "sem", 4)
	holdShared(t, ts, "sem", 4)
	holdShared(t, ts, "third", 1) // past the bound of 2 names: lock="_other"
	eventuallyMetric(t, reg, "baton_claim_grants_total", "claim=exclusive", 1)
	eventuallyMetric(t, reg, "baton_claim_grants_total", "claim=shared", 3)
	got := series(t, reg, "baton_lock_holders")
	if got["lock=mutex"] != 1 || got["lock=sem"] != 2 || len(got) != 2 {
		t.Fatalf("baton_lock_holders: got %v, want mutex 1, sem 2, and no third name (the bound is 2)", got)
	}
	if got := series(t, reg, "baton_lock_limit"); got["lock=sem"] != 4 || len(got) != 1 {
		t.Fatalf("baton_lock_limit: got %v, want sem 4 only", got)
	}

	plain := batontest.StartServer(t)
	holdShared(t, plain, "sem", 4)
	mfs, err := plain.Srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "lock" {
					t.Fatalf("%s without -metrics-lock-names: a series with lock=%q, want no lock names on /metrics", mf.GetName(), l.GetValue())
				}
			}
		}
	}
	eventuallyMetric(t, plain.Srv.Registry(), "baton_claim_grants_total", "claim=shared", 1)
}
