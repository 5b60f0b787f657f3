package baton

import "context"

// A Lock is one held lock: one open connection to the server, kept alive by
// heartbeats. It is safe for concurrent use. Call Release when done; until
// then, or until ownership ends, the lock stays held however long the work
// takes.
type Lock struct {
	name  string
	token uint64
	s     *session
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Token is the fencing token of this grant: greater than the token of every
// earlier grant of the same name, also across server restarts. Pass it to the
// resource the lock guards, and have the resource refuse a token lower than
// the highest it has seen: that is what protects it from a holder that has
// not yet noticed its loss.
func (l *Lock) Token() uint64 { return l.token }

// Context is cancelled the moment ownership is no longer confirmed, or on
// Release; context.Cause gives the reason, as Err does. From Acquire, it
// carries the values of Acquire's context, not its cancellation; in Do, it is
// the work's context, which Do's context also ends.
func (l *Lock) Context() context.Context { return l.s.ctx }

// Done is closed when ownership ends: Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.s.ctx.Done() }

// Err is context.Cause(l.Context()): nil while the lock is held; afterwards
// ErrReleased after Release, or an error wrapping ErrLockLost and the cause
// (in Do, also the cause of Do's context when that ends first).
func (l *Lock) Err() error { return context.Cause(l.s.ctx) }

// Release closes the connection, which releases the lock (the server hands it
// to the next waiter at once), and waits for the lock's goroutines to end.
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
