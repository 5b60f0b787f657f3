package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// The tests of this file suspend the server's machine, as far as the
// server can tell (batontest.SuspendClock): its clock jumps, while Go's
// monotonic clock and the reaper's timer do not, as CLOCK_BOOTTIME and
// CLOCK_MONOTONIC on Linux across a real suspend. Whoever looks at the
// table first after the resume must find what the suspend ended.

// suspendedServer starts a server on a clock that the test suspends (that
// stops during a suspend with stops: the control).
func suspendedServer(t *testing.T, stops bool, mutate ...func(*server.Config)) (*batontest.Server, *batontest.SuspendClock) {
	t.Helper()
	clk := &batontest.SuspendClock{Stops: stops}
	ts := batontest.StartServer(t, append([]func(*server.Config){func(c *server.Config) { c.Now = clk.Now }}, mutate...)...)
	return ts, clk
}

// got says what a read brought: a frame, or nothing and why.
func got(f batontest.Frame, err error) string {
	if err != nil {
		return fmt.Sprintf("no frame (%v)", err)
	}
	return f.String()
}

// TestSuspendExpiresOnFirstLook: a holder silent for its lease because the
// server's machine slept is expired at the first look after the resume,
// whoever looks (its own heartbeat, a waiter's, another ACQUIRE), and the
// waiter is pushed ACQUIRED at once: not when the reaper's timer, late by
// the suspend, fires.
func TestSuspendExpiresOnFirstLook(t *testing.T) {
	t.Parallel()
	const lease = 5 * time.Second
	for _, look := range []string{"the holder's heartbeat", "the waiter's heartbeat", "another ACQUIRE"} {
		t.Run(look, func(t *testing.T) {
			t.Parallel()
			ts, clk := suspendedServer(t, false)
			h, tok := hold(t, ts, "jobs", lease)
			w := queue(t, ts, "jobs", longLease, 1) // its lease outlasts the suspend
			clk.Suspend(lease + time.Second)

			switch look {
			case "the holder's heartbeat":
				h.Heartbeat()
			case "the waiter's heartbeat":
				w.Heartbeat()
				expectWaiting(t, w, 1) // the reply: its place when it asked
			case "another ACQUIRE":
				hold(t, ts, "other", longLease)
			}
			// A second is far less than the 5 s the reaper's timer still
			// counts: only the look can have ended it.
			if f, err := h.TryReadFrame(time.Second); err != nil || f.Type != wire.TypeError || f.Err.Code != wire.CodeLeaseExpired {
				t.Fatalf("the holder, after a suspend of %v past its lease of %v, then %s: got %s, want ERROR LEASE_EXPIRED at once", lease+time.Second, lease, look, got(f, err))
			}
			if f, err := w.TryReadFrame(time.Second); err != nil || f.Type != wire.TypeAcquired || !f.Push || f.Token <= tok {
				t.Fatalf("the waiter: got %s, want the push ACQUIRED PUSH=1 with a token above %d at once", got(f, err), tok)
			}
		})
	}
}

// TestSuspendControl: on a clock that stops during a suspend, as Go's
// monotonic clock does, the holder's heartbeat after a suspend past its
// lease is confirmed: the harm TestSuspendExpiresOnFirstLook rules out,
// seen here so that the scenario is known to show it.
func TestSuspendControl(t *testing.T) {
	t.Parallel()
	const lease = 5 * time.Second
	ts, clk := suspendedServer(t, true)
	h, tok := hold(t, ts, "jobs", lease)
	clk.Suspend(lease + time.Second)
	expectHolds(t, h, tok)
}

// TestSuspendEndsGrace: the crash-recovery grace of a standalone server and
// the failover grace of a cluster's new leader count a suspend of the
// server's machine too (the clients of the crashed run, or of the old
// leader, lived through it): the first look after it grants.
func TestSuspendEndsGrace(t *testing.T) {
	t.Parallel()
	const grace = 10 * time.Second
	for _, kind := range []string{"crash-recovery grace", "failover grace"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var ts *batontest.Server
			var clk *batontest.SuspendClock
			if kind == "crash-recovery grace" {
				ts, clk = suspendedServer(t, false, func(c *server.Config) { c.NoGrantFor = grace })
			} else {
				ts, clk = suspendedServer(t, false, func(c *server.Config) { c.Replica = &batontest.Replica{} })
				ts.Srv.BeginTerm(grace, server.Carried{})
			}
			w := queue(t, ts, "jobs", longLease, 1) // its lease outlasts the suspend
			clk.Suspend(grace)
			w.Heartbeat()
			expectWaiting(t, w, 1) // the reply: its place when it asked
			if f, err := w.TryReadFrame(time.Second); err != nil || f.Type != wire.TypeAcquired || !f.Push {
				t.Fatalf("after a suspend as long as the %s of %v: got %s, want the push ACQUIRED PUSH=1 at once", kind, grace, got(f, err))
			}
		})
	}
}
