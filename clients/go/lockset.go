package baton

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// A LockSet is several locks held together, taken with AcquireAll or
// DoAll. Its context ends when any one of them is lost; Err reads every
// lock's clock. It is safe for concurrent use.
type LockSet struct {
	locks  []*Lock // in the order taken: by name
	ctx    *setContext
	cancel context.CancelCauseFunc
}

// AcquireAll takes every lock of names, or none: it waits for them one at
// a time in the byte order of the names, so that two callers that want
// overlapping sets cannot each hold what the other waits for. If one
// cannot be taken (ctx ends, an error, or WithNoWait and a held lock), or
// one already taken is lost while a later one is awaited, it releases
// those it holds and returns that error. Names must be distinct. opts
// apply to every lock, as for Acquire, and ForName's to one lock only: a
// set can hold a reader's claim on one name and a writer's on another, or
// a slot of a semaphore. ctx bounds the whole wait, not the LockSet.
//
// The order keeps shared claims free of deadlock too: whoever waits for a
// name holds only names before it, so a chain of waits can only climb the
// order, and ends.
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...Option) (*LockSet, error) {
	return c.acquireAll(ctx, names, context.WithoutCancel(ctx), opts)
}

// DoAll takes every lock of names as AcquireAll does, runs work while they
// are all held, and releases them. work's context is the LockSet's: it
// ends when any lock is lost, or when ctx ends. Before each step that
// touches a guarded resource, work asks set.Err(), which reads the clock
// of every lock. DoAll returns what Do would: work's error, or an error
// wrapping ErrLockLost if a lock was lost while work ran.
func (c *Client) DoAll(ctx context.Context, names []string, work func(ctx context.Context, set *LockSet) error, opts ...Option) error {
	if work == nil {
		return fmt.Errorf("acquire %q: DoAll needs a work function, got nil", names)
	}
	set, err := c.acquireAll(ctx, names, ctx, opts)
	if err != nil {
		return err
	}
	defer set.Release() // also if work panics
	werr := work(set.Context(), set)
	return workResult(werr, set.Release())
}

func (c *Client) acquireAll(ctx context.Context, names []string, parent context.Context, opts []Option) (*LockSet, error) {
	sorted := slices.Sorted(slices.Values(names))
	if len(sorted) == 0 {
		return nil, &opError{op: "acquire all", err: badRequest("no lock names")}
	}
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, &opError{op: "acquire all", err: badRequest("lock name %q given twice", sorted[i])}
		}
	}
	var call settings
	call.apply(opts)
	for name := range call.perName {
		if _, ok := slices.BinarySearch(sorted, name); !ok {
			return nil, &opError{op: "acquire all", err: badRequest("ForName(%q) names no lock of the set %q", name, names)}
		}
	}
	inner, cancel := context.WithCancelCause(parent)
	set := &LockSet{cancel: cancel}
	set.ctx = &setContext{Context: inner, set: set}
	for _, name := range sorted {
		l, err := c.acquireInSet(ctx, name, inner, opts, cancel)
		if err != nil {
			set.Release() // all or nothing
			return nil, err
		}
		set.locks = append(set.locks, l)
	}
	return set, nil
}

// acquireInSet takes one lock of a set whose context is setCtx, giving up
// the wait if a lock taken before it is lost (which cancels setCtx).
func (c *Client) acquireInSet(ctx context.Context, name string, setCtx context.Context, opts []Option, lost context.CancelCauseFunc) (*Lock, error) {
	wait, stopWait := context.WithCancelCause(ctx)
	defer stopWait(nil)
	stop := context.AfterFunc(setCtx, func() { stopWait(context.Cause(setCtx)) })
	defer stop()
	l, err := c.acquire(wait, name, setCtx, opts, lost)
	if err != nil && ctx.Err() == nil {
		if cause := context.Cause(setCtx); errors.Is(cause, ErrLockLost) {
			return nil, &opError{op: "acquire", name: name, err: cause}
		}
	}
	return l, err
}

// Locks returns the locks of the set, by name.
func (s *LockSet) Locks() []*Lock { return slices.Clone(s.locks) }

// Token returns the fencing token of the lock name in the set, and whether
// the set has it.
func (s *LockSet) Token(name string) (uint64, bool) {
	for _, l := range s.locks {
		if l.name == name {
			return l.token, true
		}
	}
	return 0, false
}

// Context is cancelled when any lock of the set is lost, or on Release;
// context.Cause says which lock and why. Its Err reads every lock's clock,
// as Lock.Err does; its Done channel, and what is derived from it, can be
// late after a pause of the process.
func (s *LockSet) Context() context.Context { return s.ctx }

// Done is closed when the set ends: Context().Done().
func (s *LockSet) Done() <-chan struct{} { return s.ctx.Done() }

// Err is nil while every lock of the set is held; afterwards ErrReleased
// after Release, or the error that ended the first lock lost (wrapping
// ErrLockLost). Like Lock.Err it reads the clock: ask it right before each
// step that touches a guarded resource.
func (s *LockSet) Err() error { return context.Cause(s.ctx) }

// Release releases every lock of the set (in reverse order) and returns nil
// if all were held until then, or the errors of those that were lost. It
// may be called any number of times.
func (s *LockSet) Release() error {
	s.cancel(ErrReleased) // the work's context ends first, as with Lock.Release
	var errs []error
	for _, l := range slices.Backward(s.locks) {
		if err := l.Release(); err != nil {
			errs = append(errs, err)
		}
	}
	s.cancel(ErrReleased)
	return errors.Join(errs...)
}

// setContext is a LockSet's context; like lockContext, its Err and Done
// read the clock of every lock first.
type setContext struct {
	context.Context // the cancelCtx that a loss, or Release, cancels
	set             *LockSet
}

func (c *setContext) Err() error {
	for _, l := range c.set.locks {
		l.s.checkClock()
	}
	return c.Context.Err()
}

func (c *setContext) Done() <-chan struct{} {
	for _, l := range c.set.locks {
		l.s.checkClock()
	}
	return c.Context.Done()
}
