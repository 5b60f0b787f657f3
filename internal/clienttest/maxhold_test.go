package clienttest

import (
	"context"
	"errors"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

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
	a := newTestClient(t, []string{srv.Addr}, baton.WithLease(lease))
	b := newTestClient(t, []string{srv.Addr})
	// Before the ACQUIRE: the hold starts when the grant arrives, which is
	// before acquire returns, so a time taken after it could come out later
	// than the hold's start and the wait shorter than the maximum hold.
	beforeGrant := time.Now()
	l := acquire(t, a, "stuck", baton.WithMaxHold(maxHold))
	if v := time.Until(l.ValidUntil()); v > maxHold {
		t.Errorf("ValidUntil in %v, want within the maximum hold %v", v, maxHold)
	}
	ch := acquireLater(t, srv.Srv, b, "stuck")
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if d := r.at.Sub(beforeGrant); d < maxHold || d > maxHold+2*time.Second {
		t.Errorf("waiter granted %v after the holder, want just after the maximum hold %v (lease %v)", d, maxHold, lease)
	}
	err := l.Err()
	if !errors.Is(err, baton.ErrLockLost) || !errors.Is(err, baton.ErrMaxHoldReached) {
		t.Errorf("holder's Err() = %v, want ErrLockLost and ErrMaxHoldReached", err)
	}
	if got := l.Release(); got != err {
		t.Errorf("Release() = %v, want %v", got, err)
	}
	if _, err := a.Acquire(context.Background(), "stuck", baton.WithMaxHold(-time.Second)); !errors.Is(err, baton.ErrBadRequest) {
		t.Errorf("negative maximum hold: %v, want ErrBadRequest", err)
	}
}
