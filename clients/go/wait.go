package baton

import "time"

// A WaitState is what a waiter knows of its place, for WithWaitStateFunc.
type WaitState struct {
	// Position is the place in the queue (1 is next), from the server's
	// latest WAITING.
	Position int
	// Grace is how long the server still grants nothing, whoever waits (a
	// restarted server's crash grace, a new leader's failover grace), when
	// the server tells: GraceKnown is then true. Protocol versions 1 and 2
	// carry no such field, so it is unknown today; baton locks, baton run
	// and the dashboard show it from the ops API (grace_remaining_ms).
	Grace      time.Duration
	GraceKnown bool
}

// WithWaitStateFunc has f called with the wait's state on every WAITING
// reply while Acquire waits, as WithWaitingFunc's f is with the position
// (both may be given). f runs on the session's heartbeat loop, so it must
// return at once. The WaitState carries what the server tells of the
// wait; it grows as the protocol does, where a new function argument
// could not.
func WithWaitStateFunc(f func(WaitState)) Option { return func(s *settings) { s.waitState = f } }

// waitingFunc is the session's position callback: WithWaitingFunc's and
// WithWaitStateFunc's f, nil if neither is given.
func (s *settings) waitingFunc() func(position int) {
	waiting, state := s.waiting, s.waitState
	switch {
	case state == nil:
		return waiting
	case waiting == nil:
		return func(p int) { state(WaitState{Position: p}) }
	}
	return func(p int) {
		waiting(p)
		state(WaitState{Position: p})
	}
}
