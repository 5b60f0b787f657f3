package baton

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// Errors. Test for them with errors.Is; use errors.As with a *wire.Error to
// read the code of an ERROR frame the server sent.
//
// The sentinels for protocol codes are *wire.Error values that match by code,
// so errors.Is(err, ErrBusy) is the same test as
// errors.Is(err, &wire.Error{Code: wire.CodeBusy}).
var (
	// ErrLockLost: ownership ended while the lock was held, for any reason
	// other than Release. Every such error wraps it, together with the cause
	// (ErrUnconfirmed, ErrForceReleased, ErrLeaseExpired, ErrShutdown, or the
	// I/O error of a broken connection). The work the lock guarded must stop.
	ErrLockLost = errors.New("lock lost")

	// ErrUnconfirmed: the server confirmed nothing for 0.8 × lease, so the
	// client ended the session itself, before the server could give the lock
	// to another client (see the package doc).
	ErrUnconfirmed = errors.New("no confirmation from the server")

	// ErrReleased is the cause of a Lock's context after Release.
	ErrReleased = errors.New("lock released")

	// ErrMaxHoldReached: the lock was held for the maximum that WithMaxHold
	// set, and the client released it. It comes wrapped with ErrLockLost:
	// ownership ended without Release, and the work must stop.
	ErrMaxHoldReached = errors.New("maximum hold reached")

	// ErrAlreadyHeld: Acquire or Do was called for a name that the same
	// Client already holds or waits for. Locks are not re-entrant: such a
	// call would queue behind its own caller and, if the caller waits for
	// it, never be granted. It is refused at once, without dialling, unless
	// WithQueueBehindSelf(true) asks for exactly that. A WithNoWait(true)
	// call is not refused: it cannot wait, and the server answers ErrBusy.
	ErrAlreadyHeld = errors.New("lock already held or awaited through this client (locks are not re-entrant)")

	// ErrNoAnswer: no server answered. A server accepted the connection
	// but did not answer the ACQUIRE within the answer bound (0.8 × lease,
	// at most 5s: a live server answers at once, and bounds every write of
	// its own by its -io-timeout, 5s by default), or, after a server had
	// answered, none accepted a connection. While waiting, Acquire reports
	// it to the logger (at Warn) and to WithRetryFunc, and tries again after
	// a backoff, the next address first; once ctx ends, its error wraps
	// ErrNoAnswer beside ctx's error when the wait ended without a place in
	// a queue for that reason.
	ErrNoAnswer = errors.New("no answer from the server")

	// ErrTLS: the TLS handshake with a server failed: its certificate is
	// not one this client trusts (another CA, another name, expired), or
	// the server refused this client's (then the error also matches
	// ErrUnauthorized). It is a configuration to fix, never a server
	// that is down: it is not retried, WithWaitForServer does not wait it
	// out, and IsRetryable is false. A refused connection is a *net.OpError
	// without it.
	ErrTLS = errors.New("TLS handshake failed")

	// ErrWrongPort: the address is not a Baton lock port: the server
	// answered in HTTP, or it is Baton's ops HTTP port, which answers a
	// lock client with an ERROR naming the lock port. Not retried.
	ErrWrongPort = errors.New("not a Baton lock port")

	// Server conditions (0x01-0x0F). While waiting, the client handles these
	// itself by reconnecting; callers see them only once the lock was held
	// (wrapped with ErrLockLost) or in the last error when ctx ends.

	// ErrShutdown: the server is shutting down (SHUTDOWN).
	ErrShutdown error = &wire.Error{Code: wire.CodeShutdown}
	// ErrOverloaded: a server limit refused the session (OVERLOADED).
	ErrOverloaded error = &wire.Error{Code: wire.CodeOverloaded}
	// ErrNotLeader: this node of a cluster is not the leader, or has just
	// lost leadership (NOT_LEADER). While waiting, the client follows the
	// leader's address in the message if it is one of its own addresses.
	ErrNotLeader error = &wire.Error{Code: wire.CodeNotLeader}

	// Sessions ended by the lock's rules (0x10-0x1F).

	// ErrLeaseExpired: the server heard nothing for a whole lease
	// (LEASE_EXPIRED). A holder normally reports ErrUnconfirmed first.
	ErrLeaseExpired error = &wire.Error{Code: wire.CodeLeaseExpired}
	// ErrForceReleased: an operator took the lock away (FORCE_RELEASED).
	ErrForceReleased error = &wire.Error{Code: wire.CodeForceReleased}
	// ErrKicked: an operator removed this waiter from the queue (KICKED).
	ErrKicked error = &wire.Error{Code: wire.CodeKicked}
	// ErrBusy: WithNoWait(true) was given and the lock is held (BUSY).
	ErrBusy error = &wire.Error{Code: wire.CodeBusy}

	// Client errors (0x20-0x2F): a bug or a misconfiguration; never retried.
	// Inputs the client can check (name, owner, lease) are refused before
	// dialling, with ErrBadRequest.

	// ErrProtocol: the server saw a malformed frame (PROTOCOL).
	ErrProtocol error = &wire.Error{Code: wire.CodeProtocol}
	// ErrBadRequest: bad name, lease or owner text (BAD_REQUEST).
	ErrBadRequest error = &wire.Error{Code: wire.CodeBadRequest}
	// ErrVersion: the server does not speak the claim's protocol version
	// (VERSION): version 1, or version 2 for a shared claim, which a
	// server older than shared claims refuses. (A server that does not
	// speak version 3 is sent version 1 or 2 instead, by the client
	// itself: this error never comes of version 3.)
	ErrVersion error = &wire.Error{Code: wire.CodeVersion}
	// ErrUnauthorized: the server refused this client (UNAUTHORIZED).
	ErrUnauthorized error = &wire.Error{Code: wire.CodeUnauthorized}
	// ErrLimitMismatch: a shared claim's limit (WithLimit, WithShared)
	// differs from the limit in force for the name, which its other shared
	// sessions set (LIMIT_MISMATCH). The error is a *LimitMismatchError,
	// which gives that limit.
	ErrLimitMismatch error = &wire.Error{Code: wire.CodeLimitMismatch}

	// Protocol version 3: a claim carried to a new connection (a move, see
	// the package doc) can be refused. Each ends the claim; a held lock is
	// then lost (wrapped with ErrLockLost). None is ever answered with
	// another resume of the same claim.

	// ErrResumeRefused: the server cannot continue the claim
	// (RESUME_REFUSED): it ended there (expired, released by an operator,
	// ended by the server), it came back after the window for resumes, or
	// its credential is too old. A waiter that is refused takes a new place
	// at the end of the queue by itself; a holder's lock is lost, and a new
	// Acquire is a new grant with a new token (IsRetryable is true, as
	// for ErrLeaseExpired).
	ErrResumeRefused error = &wire.Error{Code: wire.CodeResumeRefused}
	// ErrSuperseded: after a crash of the server, a resumed claim with a
	// higher token that cannot hold beside this one won (SUPERSEDED). It
	// means the claim had ended without this client being told: a
	// TCP-terminating proxy between client and server, clocks that run
	// at different rates, or a credential in other hands. Logged at Error;
	// not retryable: look into it.
	ErrSuperseded error = &wire.Error{Code: wire.CodeSuperseded}
	// ErrMoved: the server moved the claim to a connection that is not
	// this client's (MOVED on the claim's own connection with no resume of
	// this client's open there): another connection used the claim's
	// credential. Logged at Error; not retryable.
	ErrMoved error = &wire.Error{Code: wire.CodeMoved}
	// ErrBadCredential: the server did not compute the credential a resume
	// carried (BAD_CREDENTIAL): the address list mixes servers of two
	// clusters or data directories, the client certificate's key changed,
	// or a bug. A client error: never retried.
	ErrBadCredential error = &wire.Error{Code: wire.CodeBadCredential}
)

// IsRetryable reports whether err, from Acquire, Do or a lost Lock, is
// worth another try of the same call: a condition of the servers or of the
// network that may have passed, not a decision or a mistake that a new try
// would meet again.
//
// True for the server conditions (ErrShutdown, ErrOverloaded, ErrNotLeader),
// ErrUnconfirmed, ErrLeaseExpired and ErrResumeRefused (the confirmation,
// or the claim's move, did not get through in time), ErrNoAnswer, a broken
// connection, and a dial that reached no server (a wrong address looks
// the same: bound the tries). False for nil, for the end of the caller's
// own context (context.Canceled, DeadlineExceeded), for an operator's
// decision (ErrForceReleased, ErrKicked), for ErrBusy (the caller asked
// not to wait), for ErrMaxHoldReached, for a claim that ended unseen or
// whose credential another connection used (ErrSuperseded, ErrMoved), for
// client errors (ErrBadRequest, ErrUnauthorized, ErrVersion, ErrProtocol,
// ErrLimitMismatch, ErrBadCredential, ErrAlreadyHeld, ErrWrongPort, a
// server that broke the protocol), and for errors that are not the
// client's (the work's own, in Do). For a lost lock, the cause decides.
//
// The client never retries a held lock by itself: a new try is a new
// grant, with a new token, and the work must start again from what the
// guarded resource has recorded. (Carrying a claim to the next server in
// a move, protocol version 3, is not a retry: the claim and its token stay
// the same, and the lock is not lost.)
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var lost *lostError
	if errors.As(err, &lost) {
		err = lost.cause
	}
	var (
		we *wire.Error
		ce *connError
		ne net.Error
	)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false // the caller's own context (also a net.Error timeout)
	case errors.Is(err, ErrMaxHoldReached), errors.Is(err, ErrAlreadyHeld), errors.Is(err, ErrWrongPort), errors.Is(err, ErrTLS):
		return false
	case errors.As(err, &we):
		// Found before any net.Error: a TLS refusal wraps both.
		return we.Code.Class() == wire.ClassServer || we.Code == wire.CodeLeaseExpired || we.Code == wire.CodeResumeRefused
	case errors.Is(err, ErrUnconfirmed), errors.Is(err, ErrNoAnswer), errors.As(err, &ce):
		return true
	case errors.As(err, &ne):
		return true // a dial or handshake that failed on the network
	}
	return false
}

// A LimitMismatchError is the refusal of a shared claim whose limit
// differs from the one in force for the name: the name's limit belongs to
// its shared sessions, holding or waiting, and the first of them set it.
// It matches ErrLimitMismatch and unwraps to the server's *wire.Error. It
// is a disagreement of configuration between this claim and the name's
// other users: never retried, and IsRetryable is false.
type LimitMismatchError struct {
	// Limit is the limit in force for the name, as the server said; 0 if
	// its message was not a number.
	Limit int
	// Asked is the limit this claim gave.
	Asked int
	err   *wire.Error
}

func (e *LimitMismatchError) Error() string {
	if e.Limit == 0 {
		return fmt.Sprintf("%s: the name's limit in force differs from this claim's %d", codeText(e.err), e.Asked)
	}
	return fmt.Sprintf("LIMIT_MISMATCH: the name's limit in force is %d, this claim's is %d", e.Limit, e.Asked)
}

func (e *LimitMismatchError) Unwrap() error { return e.err }

// limitMismatch turns a LIMIT_MISMATCH from the server into a
// *LimitMismatchError for a claim of limit asked; other errors pass as
// they are.
func limitMismatch(err error, asked int) error {
	we, ok := err.(*wire.Error)
	if !ok || we.Code != wire.CodeLimitMismatch {
		return err
	}
	limit, perr := strconv.ParseUint(we.Msg, 10, 16)
	if perr != nil {
		limit = 0
	}
	return &LimitMismatchError{Limit: int(limit), Asked: asked, err: we}
}

// codeText describes a server's ERROR without the "baton: " prefix of
// wire.Error, for use inside our own messages.
func codeText(e *wire.Error) string {
	if e.Msg == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Msg
}

// opError is a failed Acquire (or New): the operation, the lock and why.
type opError struct {
	op   string // "acquire", "baton.New"
	name string // lock name; empty for New
	err  error
}

func (e *opError) Error() string {
	var reason string
	var we *wire.Error
	switch {
	case errors.As(e.err, &we) && we == e.err:
		reason = codeText(we)
	default:
		reason = e.err.Error()
	}
	if e.op == "acquire" {
		return fmt.Sprintf("acquire %q: %s", e.name, reason)
	}
	return e.op + ": " + reason
}

func (e *opError) Unwrap() error { return e.err }

// requestError is an input the client refused before dialling. It reads as
// the check's message alone, and unwraps to the *wire.Error (BAD_REQUEST)
// the server would have sent.
type requestError struct{ e *wire.Error }

func (e *requestError) Error() string { return e.e.Msg }
func (e *requestError) Unwrap() error { return e.e }

func badRequest(format string, args ...any) error {
	return &requestError{&wire.Error{Code: wire.CodeBadRequest, Msg: fmt.Sprintf(format, args...)}}
}

// lostError is the end of a held lock: it wraps ErrLockLost and the cause.
type lostError struct {
	name  string
	cause error
}

func (e *lostError) Error() string {
	var we *wire.Error
	if errors.As(e.cause, &we) && we == e.cause {
		return fmt.Sprintf("lock %q lost: server sent %s", e.name, codeText(we))
	}
	return fmt.Sprintf("lock %q lost: %v", e.name, e.cause)
}

func (e *lostError) Unwrap() []error { return []error{ErrLockLost, e.cause} }

// brokenConn is the error of a connection to addr that failed with err: a
// tlsRefusedError if the server sent a TLS alert (it refused this client in
// the handshake), else a connError.
func brokenConn(addr string, err error) error {
	if isRemoteAlert(err) {
		return &tlsRefusedError{addr: addr, err: err}
	}
	return &connError{addr: addr, err: err}
}

// isRemoteAlert reports whether err is a TLS alert the peer sent: crypto/tls
// returns those as a *net.OpError with Op "remote error".
func isRemoteAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// tlsRefusedError is a server that refused this client's TLS handshake: no
// client certificate, an expired one, or one of a CA it does not trust.
// With TLS 1.3 the client learns it only on its first read. It matches
// ErrUnauthorized, so it is not retried.
type tlsRefusedError struct {
	addr string
	err  error
}

func (e *tlsRefusedError) Error() string {
	return fmt.Sprintf("server %s refused the TLS handshake (check the client certificate): %v", e.addr, e.err)
}

func (e *tlsRefusedError) Unwrap() []error { return []error{ErrUnauthorized, ErrTLS, e.err} }

// tlsError is a TLS handshake that failed on this side: the server's
// certificate was not accepted, or the handshake broke. It matches ErrTLS.
type tlsError struct {
	addr string
	err  error
}

func (e *tlsError) Error() string {
	return fmt.Sprintf("tls handshake with %s: %v", e.addr, e.err)
}

func (e *tlsError) Unwrap() []error { return []error{ErrTLS, e.err} }

// isTLSError reports whether err is a failed TLS handshake.
func isTLSError(err error) bool { return errors.Is(err, ErrTLS) }

// connError is a connection that broke without an ERROR frame.
type connError struct {
	addr string
	err  error
}

func (e *connError) Error() string {
	return fmt.Sprintf("connection to %s broke: %v", e.addr, e.err)
}

func (e *connError) Unwrap() error { return e.err }

// noAnswerError is an attempt that no server answered: the ACQUIRE sent to
// addr went unanswered for waited, or (err set) no server accepted the
// connection. When 0.8 × lease bounded the wait, unconfirmed says so (it
// wraps ErrUnconfirmed): the lease may be shorter than the round trip.
type noAnswerError struct {
	addr        string
	waited      time.Duration
	err         error // the dials' errors, when no connection was made
	unconfirmed error
}

func (e *noAnswerError) Error() string {
	switch {
	case e.err != nil:
		return fmt.Sprintf("no server answered: %v", e.err)
	case e.unconfirmed != nil:
		return fmt.Sprintf("no answer from %s: %v", e.addr, e.unconfirmed)
	}
	return fmt.Sprintf("no answer from %s in %v", e.addr, roundWaited(e.waited))
}

// roundWaited is a wait as a message tells it: to the tenth of a second
// from a second on, to the millisecond below.
func roundWaited(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func (e *noAnswerError) Unwrap() []error {
	errs := []error{ErrNoAnswer}
	for _, err := range []error{e.err, e.unconfirmed} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// opsPortRefusal begins the ERROR that Baton's ops HTTP listener answers
// a lock client's first frame with: "this is Baton's ops HTTP port; the
// lock protocol is on host:port".
const opsPortRefusal = "this is Baton's ops HTTP port"

// wrongPortError is an address that is not a lock port: what answered,
// in the server's words or as the first line of its HTTP answer.
type wrongPortError struct {
	addr   string
	answer string
}

func (e *wrongPortError) Error() string {
	return fmt.Sprintf("server %s is not a Baton lock port: %s", e.addr, e.answer)
}

func (e *wrongPortError) Unwrap() error { return ErrWrongPort }

// violationError is a frame the protocol does not allow from a server. It
// does not wrap a *wire.Error: a PROTOCOL code would blame the client.
type violationError struct {
	addr string
	what string
}

func (e *violationError) Error() string {
	return fmt.Sprintf("server %s broke the protocol: %s", e.addr, e.what)
}

// serverGoneError is the end of the claim's connection with no ERROR
// before it, at a frame boundary: the server's process or host went away.
type serverGoneError struct{ addr string }

func (e *serverGoneError) Error() string {
	return "server " + e.addr + " closed the connection without an ERROR (it went away)"
}

// silentError is a server that did not answer for waited: a holder's
// heartbeat, or a waiter up to its deadline.
type silentError struct {
	addr   string
	waited time.Duration
}

func (e *silentError) Error() string {
	return fmt.Sprintf("no answer from %s for %v", e.addr, roundWaited(e.waited))
}

// takenError is MOVED on the claim's own connection with no resume of this
// client open at that server: another connection took the claim over with
// its credential. It matches ErrMoved.
type takenError struct {
	addr string
	err  *wire.Error
}

func (e *takenError) Error() string {
	return fmt.Sprintf("server %s moved the claim to a connection that is not this client's: its credential was used elsewhere (MOVED)", e.addr)
}

func (e *takenError) Unwrap() error { return e.err }

// placeLostError is a waiter's move that no server answered within a
// lease: its place is given up. It matches ErrNoAnswer, so that Acquire
// takes a new place after a backoff.
type placeLostError struct{ waited time.Duration }

func (e *placeLostError) Error() string {
	return fmt.Sprintf("no server took the waiter's place back within %v; taking a new place", roundWaited(e.waited))
}

func (e *placeLostError) Unwrap() error { return ErrNoAnswer }
