package cluster

import "sync"

// counterBits is the number of low bits of a token that count grants within
// an epoch, as in internal/tokenstore.
const counterBits = 40

// tokens hands out epoch<<40 | counter, the epoch being the Raft-committed
// one of the current leadership: every token of a leadership is greater
// than every token of every earlier one, across failovers and restarts.
type tokens struct {
	mu      sync.Mutex
	epoch   uint64
	counter uint64
	tickets uint64 // the waiters' tickets of the epoch (nextTicket)
}

// setEpoch starts the counter over in a new epoch.
func (t *tokens) setEpoch(e uint64) {
	t.mu.Lock()
	t.epoch, t.counter, t.tickets = e, 0, 0
	t.mu.Unlock()
}

// next is server.Config.NextToken. Limit: 2^40 grants per leadership (12
// days of one leader at a million grants a second); past it the counter
// would run into the next epoch's range, so the node panics rather than
// hand out a token that does not rise.
func (t *tokens) next() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counter++
	if t.counter >= 1<<counterBits {
		panic("cluster: 2^40 grants in one leadership; tokens would stop rising")
	}
	return t.epoch<<counterBits | t.counter
}
