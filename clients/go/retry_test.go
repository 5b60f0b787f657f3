package baton

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/batonlock/baton/clients/go/wire"
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
		{"limit mismatch", &opError{op: "acquire", name: "jobs", err: limitMismatch(&wire.Error{Code: wire.CodeLimitMismatch, Msg: "3"}, 5)}, false},
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
