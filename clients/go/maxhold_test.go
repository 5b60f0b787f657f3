package baton

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
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
					// A heartbeat sent at the end of the hold finds the
					// connection closed: no error, and not t.Fatal outside
					// the test's goroutine.
					p.conn.Write(wire.AppendAcquired(nil, false, 7))
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
