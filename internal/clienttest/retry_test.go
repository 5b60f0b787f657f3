package clienttest

import (
	"context"
	"errors"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

// TestIntegrationDoLoss: against the real server, work that stops with
// ctx.Err() when its lock is lost makes Do return an error that matches
// ErrLockLost and not context.Canceled, so a caller that takes Canceled
// for its own shutdown does not swallow the loss; IsRetryable tells a
// force-release (an operator's decision) from a restart (a server
// condition), and a caller's cancellation stays context.Canceled.
func TestIntegrationDoLoss(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	// A restart ends a claim of versions 1 and 2 (ErrShutdown); version 3
	// moves it instead (clients/go's move tests, internal/cli's run tests).
	c := newTestClient(t, []string{srv.Addr}, baton.WithResume(false))
	doInBackground := func(ctx context.Context, name string) <-chan error {
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- c.Do(ctx, name, func(ctx context.Context, l *baton.Lock) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("Do(%q): %v", name, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("Do(%q) did not start the work", name)
		}
		return done
	}
	wait := func(done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("Do did not return")
			return nil
		}
	}

	done := doInBackground(context.Background(), "forced")
	if _, err := srv.Srv.ForceRelease("forced"); err != nil {
		t.Fatal(err)
	}
	err := wait(done)
	if !errors.Is(err, baton.ErrLockLost) || !errors.Is(err, baton.ErrForceReleased) || errors.Is(err, context.Canceled) {
		t.Errorf("force-released: Do = %v, want ErrLockLost and ErrForceReleased, not context.Canceled", err)
	}
	if baton.IsRetryable(err) {
		t.Errorf("force-released: IsRetryable(%v) = true, want false", err)
	}

	done = doInBackground(context.Background(), "restarted")
	srv.Restart(t)
	err = wait(done)
	if !errors.Is(err, baton.ErrLockLost) || !errors.Is(err, baton.ErrShutdown) || errors.Is(err, context.Canceled) {
		t.Errorf("restart: Do = %v, want ErrLockLost and ErrShutdown, not context.Canceled", err)
	}
	if !baton.IsRetryable(err) {
		t.Errorf("restart: IsRetryable(%v) = false, want true", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done = doInBackground(ctx, "shutdown")
	cancel()
	if err := wait(done); err != context.Canceled || baton.IsRetryable(err) {
		t.Errorf("caller's cancel: Do = %v, want context.Canceled, not retryable", err)
	}

	acquire(t, c, "busy")
	other := newTestClient(t, []string{srv.Addr})
	if _, err := other.Acquire(context.Background(), "busy", baton.WithNoWait(true)); !errors.Is(err, baton.ErrBusy) || baton.IsRetryable(err) {
		t.Errorf("try-lock of a held lock: %v, want ErrBusy, not retryable", err)
	}
	nowhere := newTestClient(t, []string{deadAddr(t)})
	if _, err := nowhere.Acquire(context.Background(), "any"); err == nil || !baton.IsRetryable(err) {
		t.Errorf("no server reachable: %v, want a retryable error", err)
	}
}
