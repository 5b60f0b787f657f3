package cluster

import (
	"time"

	"github.com/batonlock/baton/server"
)

// NoteLease is server.Replica.NoteLease: a lease longer than the committed
// bound is committed through Raft before its session is queued, so that
// every later leader's grace covers it. Shorter ones cost two atomics.
func (n *Node) NoteLease(lease time.Duration) error {
	_, err := n.noteLease(lease, true)
	return err
}

// TryNoteLease is server.Replica.TryNoteLease: NoteLease for a caller that
// must not wait (the idle poller's shard); false when it would need Raft.
func (n *Node) TryNoteLease(lease time.Duration) (bool, error) {
	return n.noteLease(lease, false)
}

func (n *Node) noteLease(lease time.Duration, mayWait bool) (bool, error) {
	// Noted before the bound is read: a lowering that sets fastBound after
	// this read finds the lease in noted (see lowerBound).
	for {
		old := n.noted.Load()
		if int64(lease) <= old || n.noted.CompareAndSwap(old, int64(lease)) {
			break
		}
	}
	if int64(lease) <= n.fastBound.Load() {
		if !n.leading.Load() {
			return true, server.ErrNotLeader
		}
		return true, nil
	}
	if !mayWait {
		return false, nil
	}
	n.raiseMu.Lock()
	defer n.raiseMu.Unlock()
	if !n.leading.Load() {
		return true, server.ErrNotLeader
	}
	if int64(lease) <= n.fastBound.Load() {
		return true, nil
	}
	if err := n.apply(command{Op: opBound, Epoch: n.epoch.Load(), Bound: lease}); err != nil {
		return true, err
	}
	n.fastBound.Store(int64(lease))
	return true, nil
}

func (n *Node) bound() time.Duration {
	n.fsm.mu.Lock()
	defer n.fsm.mu.Unlock()
	return n.fsm.st.LeaseBound
}

// lowerBound commits a lower lease bound once two looks in a row found no
// session (in the table, or let through NoteLease since the look before)
// that needs the current one. Never during the epoch's grace: clients of
// an earlier leader may still believe in their locks for up to the bound
// it inherited.
func (n *Node) lowerBound() {
	n.raiseMu.Lock()
	defer n.raiseMu.Unlock()
	cur := n.bound()
	if n.srv.GraceRemaining() > 0 {
		n.lowerTo = cur
		return
	}
	need := max(n.srv.MaxLease(), time.Duration(n.noted.Swap(0)))
	prev := n.lowerTo
	n.lowerTo = need
	target := max(need, prev)
	if target >= cur {
		return
	}
	// From here on no lease above target passes NoteLease without this
	// mutex; one that read the old fastBound was noted before this store,
	// so the second look finds it.
	n.fastBound.Store(int64(target))
	target = max(target, n.srv.MaxLease(), time.Duration(n.noted.Load()))
	if target >= cur {
		n.fastBound.Store(int64(cur))
		return
	}
	if hook := n.beforeLowerCommit.Swap(nil); hook != nil {
		(*hook)()
	}
	if err := n.apply(command{Op: opBound, Epoch: n.epoch.Load(), Bound: target}); err != nil {
		n.log.Warn("cannot lower the lease bound", "to", target.String(), "err", err)
		return // fastBound stays low: a longer lease raises the bound again
	}
	n.fastBound.Store(int64(target))
}
