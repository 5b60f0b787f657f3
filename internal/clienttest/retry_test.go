package baton

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/wire"
)

// TestIsRetryable: transient conditions of the servers and the network are
// worth another try; decisions, the caller's own end, client errors and
// errors that are not the client's are not. A lost lock is judged by its
// cause.
func TestIsRetryable(t *testing.T) {
	lost := func(cause error) error { return &lostError{name: "jobs", cause: cause} }
	dialRefused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"shutdown", ErrShutdown, true},
		{"overloaded", &wire.Error{Code: wire.CodeOverloaded, Msg: "sessions"}, true},
		{"not leader", &wire.Error{Code: wire.CodeNotLeader, Msg: "b:1"}, true},
		{"lost: shutdown", lost(&wire.Error{Code: wire.CodeShutdown, Msg: "bye"}), true},
		{"lost: unconfirmed", lost(fmt.Errorf("%w for 8s", ErrUnconfirmed)), true},
		{"lost: lease expired", lost(ErrLeaseExpired), true},
		{"lost: broken connection", lost(&connError{addr: "a:1", err: io.EOF}), true},
		{"no server reachable", &opError{op: "acquire", name: "jobs", err: errors.Join(dialRefused, dialRefused)}, true},
		{"lost: force-released", lost(&wire.Error{Code: wire.CodeForceReleased, Msg: "by admin"}), false},
		{"lost: maximum hold", lost(fmt.Errorf("%w: held for 1s", ErrMaxHoldReached)), false},
		{"lost: protocol violation", lost(&violationError{addr: "a:1", what: "token 0"}), false},
		{"kicked", &opError{op: "acquire", name: "jobs", err: &wire.Error{Code: wire.CodeKicked}}, false},
		{"busy", &opError{op: "acquire", name: "jobs", err: &wire.Error{Code: wire.CodeBusy}}, false},
		{"bad request", badRequest("lease 0s must be at least 1ms"), false},
		{"unauthorized TLS", &tlsRefusedError{addr: "a:1", err: &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}}, false},
		{"version", ErrVersion, false},
		{"already held", &opError{op: "acquire", name: "jobs", err: ErrAlreadyHeld}, false},
		{"certificate not trusted", fmt.Errorf("tls handshake with a:1: %w", x509.UnknownAuthorityError{}), false},
		{"caller's deadline", &opError{op: "acquire", name: "jobs", err: fmt.Errorf("%w (last attempt: %w)", context.DeadlineExceeded, dialRefused)}, false},
		{"caller's cancel", context.Canceled, false},
		{"released", ErrReleased, false},
		{"the work's own error", errors.New("disk full"), false},
		{"lost while the work failed", fmt.Errorf("%w (and the work returned: %w)", lost(ErrShutdown), errors.New("disk full")), true},
		// The cause of the loss decides, not what the work's error wraps.
		{"force-released while the work's network failed", fmt.Errorf("%w (and the work returned: %w)",
			lost(ErrForceReleased), &net.OpError{Op: "read", Err: errors.New("connection reset")}), false},
		{"broken connection while the work's own call was refused", fmt.Errorf("%w (and the work returned: %w)",
			lost(&connError{addr: "a:1", err: io.EOF}), badRequest("lease 0s must be at least 1ms")), true},
	} {
		if got := IsRetryable(tc.err); got != tc.want {
			t.Errorf("%s: IsRetryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestIntegrationDoLoss: against the real server, work that stops with
// ctx.Err() when its lock is lost makes Do return an error that matches
// ErrLockLost and not context.Canceled, so a caller that takes Canceled
// for its own shutdown does not swallow the loss; IsRetryable tells a
// force-release (an operator's decision) from a restart (a server
// condition), and a caller's cancellation stays context.Canceled.
func TestIntegrationDoLoss(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	c := newTestClient(t, []string{srv.Addr})
	doInBackground := func(ctx context.Context, name string) <-chan error {
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- c.Do(ctx, name, func(ctx context.Context, l *Lock) error {
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
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrForceReleased) || errors.Is(err, context.Canceled) {
		t.Errorf("force-released: Do = %v, want ErrLockLost and ErrForceReleased, not context.Canceled", err)
	}
	if IsRetryable(err) {
		t.Errorf("force-released: IsRetryable(%v) = true, want false", err)
	}

	done = doInBackground(context.Background(), "restarted")
	srv.Restart(t)
	err = wait(done)
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrShutdown) || errors.Is(err, context.Canceled) {
		t.Errorf("restart: Do = %v, want ErrLockLost and ErrShutdown, not context.Canceled", err)
	}
	if !IsRetryable(err) {
		t.Errorf("restart: IsRetryable(%v) = false, want true", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done = doInBackground(ctx, "shutdown")
	cancel()
	if err := wait(done); err != context.Canceled || IsRetryable(err) {
		t.Errorf("caller's cancel: Do = %v, want context.Canceled, not retryable", err)
	}

	acquire(t, c, "busy")
	other := newTestClient(t, []string{srv.Addr})
	if _, err := other.Acquire(context.Background(), "busy", WithNoWait(true)); !errors.Is(err, ErrBusy) || IsRetryable(err) {
		t.Errorf("try-lock of a held lock: %v, want ErrBusy, not retryable", err)
	}
	nowhere := newTestClient(t, []string{deadAddr(t)})
	if _, err := nowhere.Acquire(context.Background(), "any"); err == nil || !IsRetryable(err) {
		t.Errorf("no server reachable: %v, want a retryable error", err)
	}
}
