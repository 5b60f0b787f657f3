package baton

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/wire"
)

// TestMaxHoldOverPipe: to the nanosecond of the fake clock, the maximum
// hold ends the claim d after the grant while heartbeats still succeed:
// the work's context is cancelled with ErrMaxHoldReached (wrapped with
// ErrLockLost) and the connection closed at that moment; the wait in the
// queue does not count.
func TestMaxHoldOverPipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxHold = 5 * time.Second
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLease(2*time.Second), WithMaxHold(maxHold))
		done := make(chan error, 1)
		var endedAt time.Time
		go func() {
			done <- c.Do(context.Background(), "jobs", func(ctx context.Context, l *Lock) error {
				<-ctx.Done()
				endedAt = time.Now()
				return ctx.Err()
			})
		}()
		p := pn.accept(t)
		p.next(t, wire.TypeAcquire)
		p.waiting(t, 1)
		for range 3 { // a wait of some heartbeats in the queue
			p.next(t, wire.TypeHeartbeat)
			p.waiting(t, 1)
		}
		p.next(t, wire.TypeHeartbeat)
		p.acquired(t, 7)
		grantedAt := time.Now()
		go func() { // the server confirms every heartbeat
			for f := range p.rx {
				if f.typ == wire.TypeHeartbeat {
					p.acquired(t, 7)
				}
			}
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Hour):
			t.Fatalf("the work still runs an hour after the grant, with a maximum hold of %v", maxHold)
		}
		if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrMaxHoldReached) || errors.Is(err, context.Canceled) {
			t.Errorf("Do: %v, want ErrLockLost and ErrMaxHoldReached", err)
		}
		if d := endedAt.Sub(grantedAt); d != maxHold {
			t.Errorf("work stopped %v after the grant, want %v", d, maxHold)
		}
		synctest.Wait()
		if p.eof.IsZero() || !p.eof.Equal(grantedAt.Add(maxHold)) {
			t.Errorf("connection closed at +%v after the grant, want +%v", p.eof.Sub(grantedAt), maxHold)
		}
	})
}

// TestIntegrationMaxHold: against the real server, a holder whose work
// hangs while its heartbeats go on is ended at its maximum hold, and the
// next waiter is granted then (the client releases, as Release does), not
// a lease later.
func TestIntegrationMaxHold(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const (
		lease   = 10 * time.Second // the handover must not wait for it
		maxHold = 300 * time.Millisecond
	)
	a := newTestClient(t, []string{srv.Addr}, WithLease(lease))
	b := newTestClient(t, []string{srv.Addr})
	l := acquire(t, a, "stuck", WithMaxHold(maxHold))
	grantedAt := time.Now()
	if v := time.Until(l.ValidUntil()); v > maxHold {
		t.Errorf("ValidUntil in %v, want within the maximum hold %v", v, maxHold)
	}
	ch := acquireLater(t, srv.Srv, b, "stuck")
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if d := r.at.Sub(grantedAt); d < maxHold || d > maxHold+2*time.Second {
		t.Errorf("waiter granted %v after the holder, want just after the maximum hold %v (lease %v)", d, maxHold, lease)
	}
	err := l.Err()
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrMaxHoldReached) {
		t.Errorf("holder's Err() = %v, want ErrLockLost and ErrMaxHoldReached", err)
	}
	if got := l.Release(); got != err {
		t.Errorf("Release() = %v, want %v", got, err)
	}
	if _, err := a.Acquire(context.Background(), "stuck", WithMaxHold(-time.Second)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("negative maximum hold: %v, want ErrBadRequest", err)
	}
}
