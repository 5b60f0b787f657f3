package baton

import (
	"context"
	"slices"
)

// Leadership is an election won with Campaign: the lock of the election's
// name, held with the candidate's value as its owner text, so that
// operators (and the ops API) see who leads. It is a *Lock: Context ends
// when the leadership does, Err is the question to ask before each act of
// the leader, and Token numbers the terms (each leader's is higher than
// every earlier one's), to fence what the leader writes.
type Leadership struct {
	*Lock
	value string
}

// Campaign waits until this candidate leads the election name, then returns
// its leadership; value, the candidate's identity (an address, a host
// name), is sent as the lock's owner text and must follow the owner rules
// (WithOwner). Candidates lead one at a time, in the order they
// campaigned; ctx bounds the wait, as for Acquire, and opts apply as for
// Acquire (WithLease for how fast a dead leader is replaced). A leader
// holds alone: a shared claim (WithLimit, WithShared) is refused with
// ErrBadRequest.
//
// Leadership ends with Resign, or with the lock: Context is then cancelled
// with the cause. To keep leading after a loss, campaign again: the new
// term has a new token.
func (c *Client) Campaign(ctx context.Context, name, value string, opts ...Option) (*Leadership, error) {
	set := c.set.claimSettings(name, append(slices.Clip(opts), WithOwner(value)))
	if set.shared {
		return nil, &opError{op: "acquire", name: name, err: badRequest("an election has one leader: a shared claim (WithLimit, WithShared) cannot campaign")}
	}
	l, err := c.acquireWith(ctx, name, context.WithoutCancel(ctx), set, nil)
	if err != nil {
		return nil, err
	}
	return &Leadership{Lock: l, value: value}, nil
}

// Value is the value this candidate campaigned with.
func (ld *Leadership) Value() string { return ld.value }

// Resign gives up the leadership: the lock is released and the next
// candidate leads at once. It returns what Release returns: nil if this
// candidate led until then, or the error that ended its leadership before.
func (ld *Leadership) Resign() error { return ld.Release() }
