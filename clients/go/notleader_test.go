package baton

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestNotLeaderOverPipe: a waiter follows NOT_LEADER's hint at once when it
// is one of the client's addresses, never to an address off the list, and
// rotates with a short jittered wait when there is no usable hint.
func TestNotLeaderOverPipe(t *testing.T) {
	t.Run("hint on the list is followed at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"})
			ch := goAcquire(context.Background(), c, "jobs")
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			start := time.Now()
			p.fail(t, wire.CodeNotLeader, "c:1")
			p = pn.accept(t)
			if p.addr != "c:1" || time.Since(start) != 0 {
				t.Fatalf("after NOT_LEADER c:1: dialled %s after %v, want c:1 at once", p.addr, time.Since(start))
			}
			p.next(t, wire.TypeAcquire)
			p.acquired(t, 7)
			r := result(t, ch)
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.l.Release()
			if got := c.last.Load(); got != 2 {
				t.Errorf("preferred address %d, want 2 (the leader)", got)
			}
		})
	})
	t.Run("hint spelled differently still matches", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"[::1]:7070", "Node2:7070"})
			ch := goAcquire(context.Background(), c, "jobs")
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.fail(t, wire.CodeNotLeader, "node2:7070")
			p = pn.accept(t)
			if p.addr != "Node2:7070" {
				t.Fatalf("dialled %s, want Node2:7070", p.addr)
			}
			p.next(t, wire.TypeAcquire)
			p.acquired(t, 1)
			result(t, ch).l.Release()
		})
	})
	for _, hint := range []string{"", "evil.example:7070"} {
		t.Run("hint "+quoteOrEmpty(hint)+" rotates after a short wait", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, pn := newPipeClient(t, []string{"a:1", "b:1", "c:1"})
				ch := goAcquire(context.Background(), c, "jobs")
				p := pn.accept(t)
				p.next(t, wire.TypeAcquire)
				start := time.Now()
				p.fail(t, wire.CodeNotLeader, hint)
				p = pn.accept(t)
				waited := time.Since(start)
				if p.addr != "b:1" {
					t.Fatalf("dialled %s, want the next address b:1 (never the hint %q)", p.addr, hint)
				}
				if waited <= 0 || waited > electionBackoffCap {
					t.Errorf("waited %v before the next address, want a jittered wait in (0, %v]", waited, electionBackoffCap)
				}
				p.next(t, wire.TypeAcquire)
				p.acquired(t, 1)
				result(t, ch).l.Release()
				for _, a := range pn.dials {
					if a == hint {
						t.Errorf("dialled the hint %q, which is not on the list", hint)
					}
				}
			})
		})
	}
	t.Run("nodes naming each other spend the budget, then back off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1", "b:1"})
			ch := goAcquire(context.Background(), c, "jobs")
			start := time.Now()
			for i := 0; ; i++ {
				p := pn.accept(t)
				p.next(t, wire.TypeAcquire)
				if i == 20 {
					p.acquired(t, 1)
					break
				}
				other := "a:1"
				if p.addr == "a:1" {
					other = "b:1"
				}
				if i == c.redirectBudget() && time.Since(start) != 0 {
					t.Errorf("the first %d redirects took %v, want none of the clock", i, time.Since(start))
				}
				p.fail(t, wire.CodeNotLeader, other)
			}
			r := result(t, ch)
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.l.Release()
			// 20 answers, the first 4 (the budget) at once, 16 waiting
			// [cap/2, cap] each once the doubling reaches the cap.
			if el := time.Since(start); el < 16*electionBackoffCap/2/2 || el > 16*electionBackoffCap {
				t.Errorf("20 redirects took %v, want the ones past the budget to wait", el)
			}
		})
	})
	t.Run("a queued waiter resets the budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1", "b:1"})
			ch := goAcquire(context.Background(), c, "jobs")
			start := time.Now()
			for range 10 {
				p := pn.accept(t)
				p.next(t, wire.TypeAcquire)
				p.waiting(t, 1)
				other := "a:1"
				if p.addr == "a:1" {
					other = "b:1"
				}
				p.fail(t, wire.CodeNotLeader, other)
			}
			if time.Since(start) != 0 {
				t.Errorf("10 failovers of a queued waiter took %v, want each followed at once", time.Since(start))
			}
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.acquired(t, 1)
			result(t, ch).l.Release()
		})
	})
	t.Run("a holder's NOT_LEADER is a lost lock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, pn := newPipeClient(t, []string{"a:1", "b:1"})
			l, p := holdLock(t, c, pn, 9)
			p.fail(t, wire.CodeNotLeader, "b:1")
			<-l.Done()
			err := l.Err()
			if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrNotLeader) {
				t.Errorf("Err after NOT_LEADER: %v, want ErrLockLost and ErrNotLeader", err)
			}
			pn.noDial(t)
		})
	})
}

func quoteOrEmpty(s string) string {
	if s == "" {
		return "empty"
	}
	return s
}
