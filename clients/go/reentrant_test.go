package baton

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestNotReentrant: a name this Client holds, or waits for, is refused at
// once with ErrAlreadyHeld and no connection; other names are not; the name
// is free again once the Lock ends, by Release or by loss; and
// WithQueueBehindSelf lets a second call queue behind the first.
func TestNotReentrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"})
		l, p := holdLock(t, c, pn, 7)

		// Held: refused at once, nothing dialled.
		dials := pn.dialCount()
		if _, err := c.Acquire(context.Background(), "jobs"); !errors.Is(err, ErrAlreadyHeld) {
			t.Fatalf("second Acquire of a held name: %v, want ErrAlreadyHeld", err)
		}
		err := c.Do(context.Background(), "jobs", func(context.Context, *Lock) error { return nil })
		if !errors.Is(err, ErrAlreadyHeld) {
			t.Fatalf("Do of a held name: %v, want ErrAlreadyHeld", err)
		}
		if got := pn.dialCount(); got != dials {
			t.Fatalf("refused Acquire dialled %d times, want none", got-dials)
		}

		// Opted in: it queues behind the holder and is promoted when the
		// holder releases.
		ch := goAcquire(context.Background(), c, "jobs", WithQueueBehindSelf(true))
		p2 := pn.accept(t)
		p2.next(t, wire.TypeAcquire)
		p2.waiting(t, 1)
		synctest.Wait()
		l.Release()
		p.closed(t)
		p2.push(t, 8)
		r := result(t, ch)
		if r.err != nil || r.l.Token() != 8 {
			t.Fatalf("queued behind self: %v, token %d; want token 8", r.err, r.l.Token())
		}

		// Lost (force-released): the name is free again without Release.
		p2.fail(t, wire.CodeForceReleased, "")
		<-r.l.Done()
		synctest.Wait()
		ch = goAcquire(context.Background(), c, "jobs")
		p3 := pn.accept(t)
		p3.next(t, wire.TypeAcquire)
		p3.acquired(t, 9)
		if r := result(t, ch); r.err != nil {
			t.Fatalf("Acquire after the lock was lost: %v, want it granted", r.err)
		} else {
			r.l.Release()
		}

		// A failed Acquire frees the name too.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ch = goAcquire(ctx, c, "other")
		p4 := pn.accept(t)
		p4.next(t, wire.TypeAcquire)
		p4.waiting(t, 1)
		if r := result(t, ch); r.err == nil {
			t.Fatal("Acquire past its context: no error")
		}
		cancel()
		ch = goAcquire(context.Background(), c, "other", WithNoWait(true))
		p5 := pn.accept(t)
		p5.next(t, wire.TypeAcquire)
		p5.fail(t, wire.CodeBusy, "")
		if r := result(t, ch); !errors.Is(r.err, ErrBusy) {
			t.Fatalf("Acquire after a timed-out one: %v, want ErrBusy from the server (not ErrAlreadyHeld)", r.err)
		}
	})
}

// TestReleaseFreesTheNameAtOnce: after Release returns, the same Client may
// take the name again at once (the name is freed before Release returns,
// not some time after).
func TestReleaseFreesTheNameAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, pn := newPipeClient(t, []string{"pipe:1"})
		for i := range 200 {
			ch := goAcquire(context.Background(), c, "jobs")
			p := pn.accept(t)
			p.next(t, wire.TypeAcquire)
			p.acquired(t, uint64(i+1))
			r := result(t, ch)
			if r.err != nil {
				t.Fatalf("Acquire #%d right after a Release: %v", i+1, r.err)
			}
			r.l.Release()
		}
	})
}
