package baton

import (
	"context"
	"time"
)

// A Lock is one held lock: one open connection to the server, kept alive by
// heartbeats. It is safe for concurrent use. Call Release when done; until
// then, or until ownership ends, the lock stays held however long the work
// takes. A move of the claim to the next server (protocol version 3: a
// restart, a change of leader) does not end it: the Lock, its token and
// its context go on, on the new connection.
type Lock struct {
	name  string
	token uint64
	s     *claim
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Shared reports whether the lock is held by a shared claim (WithLimit,
// WithShared), together with other shared holders; false for an exclusive
// claim, which holds the name alone.
func (l *Lock) Shared() bool { return l.s.shared }

// Limit is how many claims may hold the name together with this one, this
// one included: the limit of a shared claim (ReaderLimit for a reader), 1
// for an exclusive one.
func (l *Lock) Limit() int {
	if !l.s.shared {
		return 1
	}
	return l.s.limit
}

// Token is the fencing token of this grant: greater than the token of every
// earlier grant of the same name, also across server restarts. Pass it to the
// resource the lock guards, and have the resource refuse a token lower than
// the highest it has seen: that is what protects it from a holder that has
// not yet noticed its loss, a paused process included. With shared holders
// that rule holds for the exclusive claims (a read/write lock's writer); a
// semaphore's holders need another check (see the package doc).
func (l *Lock) Token() uint64 { return l.token }

// Err is the question to ask right before each step of work that touches
// the guarded resource. It is nil while the lock is held; afterwards
// ErrReleased after Release, or an error wrapping ErrLockLost and the cause
// (in Do, also the cause of Do's context when that ends first).
//
// It reads the clock: once the server has confirmed nothing for 0.8 ×
// lease since the send of the last request it answered (or the maximum
// hold has passed), Err reports the loss at once, even if the process has
// just woken from a pause (GC, SIGSTOP, a blocked thread) or the machine
// from a suspend, and the lock's own goroutines have not run yet. Asked
// again, it gives the same answer. The clock is package clock's, which
// counts a suspend (CLOCK_BOOTTIME on Linux): Go's monotonic clock, and
// the timers that count it, stop while the machine sleeps.
// It cannot see a loss that the server has not yet decided and the client
// not yet heard of, such as a force-release in flight: the fencing token
// covers that window.
func (l *Lock) Err() error { return context.Cause(l.s.ctx) }

// ValidUntil is the time up to which the lock stays held unless it is taken
// away (force-release, server shutdown, a broken connection): the client's
// deadline, 0.8 × lease after the send of the last request the server
// answered, or the end of the maximum hold if sooner. Heartbeats move it
// on, and so does the answer to a move's resume. It is on time.Now's clock, as the time left when it is asked:
// compare it with time.Now, or use time.Until, to decide whether a step
// fits, and ask again for the next step (after a suspend of the machine,
// an answer given before it is too late by the suspend's length; Err is
// right at once). It is the zero Time once the lock has ended.
func (l *Lock) ValidUntil() time.Time {
	if l.Err() != nil {
		return time.Time{}
	}
	return l.s.validUntil()
}

// Context is cancelled when ownership is no longer confirmed, or on
// Release; context.Cause gives the reason, as Err does. From Acquire, it
// carries the values of Acquire's context, not its cancellation; in Do, it
// is the work's context, which Do's context also ends.
//
// Its Err (and context.Cause of it) reads the clock as Lock.Err does. Its
// Done channel, and every context derived from it, is closed by the lock's
// goroutine: after a pause of the process that can come after the work's
// next step. Ask Err before a step; use Done to wake a wait.
func (l *Lock) Context() context.Context { return l.s.ctx }

// Done is closed when ownership ends: Context().Done(). A loss reaches it
// through a goroutine; Err tells it first.
func (l *Lock) Done() <-chan struct{} { return l.s.ctx.Done() }

// Release closes the connection, which releases the lock (the server hands it
// to the next waiter at once), and waits for the lock's goroutines to end.
// During a move it closes every connection of the claim, the resume
// attempts included.
// The close is a reset unless WithNormalClose: no TIME_WAIT socket is left
// behind (see there for the trade). It
// returns nil if the lock was held until Release, or the error that ended it
// before: work done after that error ran without the lock. Release may be
// called any number of times; each returns the same.
func (l *Lock) Release() error {
	l.s.close()
	<-l.s.done
	if l.s.err == ErrReleased {
		return nil
	}
	return l.s.err
}
