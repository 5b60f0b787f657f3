package baton

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// The tests of this file suspend the machine, as far as the client can
// tell (suspendClock): the clock of the deadlines moves on at once, while
// Go's monotonic clock and every timer stand still, as CLOCK_BOOTTIME and
// CLOCK_MONOTONIC do on Linux across a suspend. A holder whose host slept
// past its deadline must know the lock lost at its first look.

// TestSuspendAnswers: the first question after a suspend past the deadline
// (or past the maximum hold) reports the loss, and ValidUntil counts a
// shorter suspend.
func TestSuspendAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		suspend time.Duration
		is      error
		message string
	}{
		{"past the deadline", nil, 30 * time.Second, ErrUnconfirmed,
			`lock "jobs" lost: no confirmation from the server for 8s (0.8 × lease 10s)`},
		{"past the maximum hold", []Option{WithMaxHold(5 * time.Second)}, 6 * time.Second, ErrMaxHoldReached,
			`lock "jobs" lost: maximum hold reached: held for 5s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"pipe:1"}, append([]Option{WithLease(10 * time.Second)}, tc.opts...)...)
				l, _ := holdLock(t, c, pn, 7)
				time.Sleep(time.Second)
				if err := l.Err(); err != nil {
					t.Fatalf("Err() before the suspend = %v, want nil", err)
				}
				pn.clock.suspend(tc.suspend)
				err := l.Err()
				if !errors.Is(err, ErrLockLost) || !errors.Is(err, tc.is) || err.Error() != tc.message {
					t.Fatalf("Err() right after a suspend of %v = %v, want %q", tc.suspend, err, tc.message)
				}
				if v := l.ValidUntil(); !v.IsZero() {
					t.Errorf("ValidUntil() after the suspend = %v, want the zero Time", v)
				}
				if l.Context().Err() == nil {
					t.Errorf("the context's Err() after the suspend is nil")
				}
			})
		})
	}
}

// TestSuspendControl: on a clock that stops during a suspend, as Go's
// monotonic clock does, the holder asked right after a suspend past its
// deadline believes it holds: the harm TestSuspendAnswers rules out, seen
// here so that the scenario is known to show it.
func TestSuspendControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(10*time.Second))
		pn.clock.stops = true
		l, _ := holdLock(t, c, pn, 7)
		pn.clock.suspend(30 * time.Second)
		if err := l.Err(); err != nil {
			t.Fatalf("Err() after a suspend the clock did not count = %v, want nil: the scenario no longer shows the harm", err)
		}
	})
}

// TestSuspendShortensValidUntil: a suspend shorter than the time left
// takes its length off ValidUntil, which is on time.Now's clock.
func TestSuspendShortensValidUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(10*time.Second))
		start := time.Now()
		l, _ := holdLock(t, c, pn, 7)
		pn.clock.suspend(3 * time.Second)
		if got, want := l.ValidUntil(), start.Add(5*time.Second); !got.Equal(want) {
			t.Errorf("after a suspend of 3s: ValidUntil() = +%v, want +%v (0.8 × lease 10s, less the suspend)", got.Sub(start), want.Sub(start))
		}
		if err := l.Err(); err != nil {
			t.Errorf("Err() after a suspend of 3s = %v, want nil: 5s are left", err)
		}
	})
}

// TestSuspendWatchdog: with nobody asking, the lock's goroutine ends a
// lock whose deadline a suspend passed at its next wake, a quarter lease
// after the resume at most, not at the deadline its timers count (they
// stood still during the suspend); and it sends nothing past the
// deadline. The suspend comes between two heartbeats, or while one waits
// for a reply that never comes.
func TestSuspendWatchdog(t *testing.T) {
	for _, pending := range []bool{false, true} {
		t.Run(fmt.Sprintf("heartbeat pending %v", pending), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const lease = 10 * time.Second
				c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(lease))
				l, p := holdLock(t, c, pn, 7)
				p.next(t, wire.TypeHeartbeat) // at lease/4
				if pending {
					time.Sleep(2600 * time.Millisecond) // just past the first look, lease/4 after the send
				} else {
					p.acquired(t, 7)
					time.Sleep(time.Second)
				}
				done := l.Done() // taken before: its close is up to the lock's goroutine
				pn.clock.suspend(30 * time.Second)
				woke := time.Now()
				select {
				case <-done:
				case <-time.After(lease):
					t.Fatalf("Done not closed %v after the wake from a suspend of 30s past the deadline: the lock's goroutine believes it holds", lease)
				}
				if waited := time.Since(woke); waited > lease/4 {
					t.Errorf("Done closed %v after the wake, want within lease/4 (%v)", waited, lease/4)
				}
				if err := context.Cause(l.Context()); !errors.Is(err, ErrUnconfirmed) {
					t.Errorf("the loss's cause = %v, want ErrUnconfirmed", err)
				}
				if _, sent := p.closed(t); len(sent) > 0 {
					t.Errorf("the client sent %d frames (a %v first) after the suspend, past its deadline", len(sent), sent[0].typ)
				}
			})
		})
	}
}

// TestSuspendPush: a promotion push read after a suspend past the waiting
// session's deadline grants nothing: the server may have ended the
// session meanwhile and given the lock to another.
func TestSuspendPush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(10*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := goAcquire(ctx, c, "jobs")
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 1)
		time.Sleep(time.Second)
		pn.clock.suspend(30 * time.Second)
		p.push(t, 9)
		synctest.Wait()
		select {
		case r := <-ch:
			if r.err == nil {
				r.l.Release()
				t.Fatalf("Acquire returned a Lock (token %d) from a push read after a suspend past the deadline", r.l.Token())
			}
			t.Fatalf("Acquire: %v, want it to try again", r.err)
		default:
		}
		// The session ended unconfirmed: the client dials again.
		p.closed(t)
		pn.accept(t)
		cancel()
		if r := result(t, ch); r.err == nil {
			r.l.Release()
			t.Fatalf("Acquire returned a Lock (token %d), want the cancellation", r.l.Token())
		}
	})
}
