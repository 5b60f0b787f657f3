package locktable

import "fmt"

// CheckInvariants checks the table's internal structure: the expiry heap,
// the queues' links and counts, and the maps agreeing with each other. The
// randomized test calls it after every step.
func (t *Table) CheckInvariants() error {
	if len(t.expiry) != len(t.sessions) {
		return fmt.Errorf("expiry heap holds %d sessions, want %d", len(t.expiry), len(t.sessions))
	}
	for i, s := range t.expiry {
		if s.heapIdx != i {
			return fmt.Errorf("session %d at heap index %d has heapIdx %d", s.id, i, s.heapIdx)
		}
		if t.sessions[s.id] != s {
			return fmt.Errorf("session %d in the heap is not in the sessions map", s.id)
		}
		if i > 0 && s.deadline.Before(t.expiry[(i-1)/2].deadline) {
			return fmt.Errorf("heap order broken at index %d: %v before its parent's %v", i, s.deadline, t.expiry[(i-1)/2].deadline)
		}
	}
	for id, s := range t.sessions {
		if s.id != id {
			return fmt.Errorf("session %d filed under id %d", s.id, id)
		}
		if want := s.lastSeen.Add(s.lease); !s.deadline.Equal(want) {
			return fmt.Errorf("session %d: deadline %v, want lastSeen+lease %v", id, s.deadline, want)
		}
		if t.locks[s.lock.name] != s.lock {
			return fmt.Errorf("session %d: its lock %q is not in the locks map", id, s.lock.name)
		}
		if s.held() != s.lock.holds(s) {
			return fmt.Errorf("session %d: held() %v but the lock's holders say %v", id, s.held(), s.lock.holds(s))
		}
		if s.shared && s.limit != s.lock.limit {
			return fmt.Errorf("session %d: shared with limit %d, the name's is %d", id, s.limit, s.lock.limit)
		}
		if s.pending && (!s.carried || s.resumed) {
			return fmt.Errorf("session %d: pending, but carried %v, resumed %v", id, s.carried, s.resumed)
		}
		if s.revoked && !s.pending {
			return fmt.Errorf("session %d: revoked but not pending", id)
		}
		if t.byToken == nil {
			if s.ticket != 0 || s.carried || s.attempt != 0 {
				return fmt.Errorf("session %d: a ticket %d, carried %v or attempt %d in a table without tickets", id, s.ticket, s.carried, s.attempt)
			}
			continue
		}
		if s.held() && t.byToken[s.token] != s {
			return fmt.Errorf("session %d: token %d not indexed", id, s.token)
		}
		if s.ticket != 0 && t.byTicket[s.ticket] != s {
			return fmt.Errorf("session %d: ticket %d not indexed", id, s.ticket)
		}
		if !s.held() && s.ticket == 0 {
			return fmt.Errorf("session %d waits without a ticket", id)
		}
	}
	if err := t.checkIndex(); err != nil {
		return err
	}
	for name, l := range t.locks {
		if l.name != name {
			return fmt.Errorf("lock %q filed under %q", l.name, name)
		}
		if l.first == nil && l.head == nil {
			return fmt.Errorf("lock %q has neither holder nor waiters", name)
		}
		// During the grace period nothing is granted: every holder came
		// back, or is pending.
		for h := l.first; h != nil && !t.graceUntil.IsZero(); h = h.next {
			if !h.carried {
				return fmt.Errorf("lock %q has holder %d, granted during the grace period", name, h.id)
			}
		}
		// The holders: linked both ways, counted, held, of this lock; at
		// most one exclusive claim and then alone, or shared claims within
		// the limit.
		h, shared := 0, 0
		var hprev *session
		for s := l.first; s != nil; s = s.next {
			h++
			if s.prev != hprev {
				return fmt.Errorf("lock %q: holder %d has prev %v, want %v", name, s.id, s.prev, hprev)
			}
			if !s.held() || s.lock != l || t.sessions[s.id] != s {
				return fmt.Errorf("lock %q: holder %d is not held, of another lock, or not in the map", name, s.id)
			}
			if s.shared {
				shared++
			}
			hprev = s
		}
		if l.last != hprev || h != l.holders {
			return fmt.Errorf("lock %q: last holder %v, %d holders linked, want %v and the count %d", name, l.last, h, hprev, l.holders)
		}
		if shared != h && h > 1 {
			return fmt.Errorf("lock %q: an exclusive holder among %d holders", name, h)
		}
		if shared > 0 && shared > l.limit {
			return fmt.Errorf("lock %q: %d shared holders, over the limit %d", name, shared, l.limit)
		}
		// Nobody waits behind a head that may hold (outside the grace
		// period), unless the queue was left moving (Config.GrantStep);
		// a queue left moving has such a head, and is listed for Promote.
		mayMove := l.head != nil && t.graceUntil.IsZero() && l.mayGrant(l.head)
		if mayMove != l.moving {
			return fmt.Errorf("lock %q: head may hold %v, but left moving %v (holders %d, limit %d)", name, mayMove, l.moving, l.holders, l.limit)
		}
		if l.moving && !l.listed {
			return fmt.Errorf("lock %q is left moving but not listed for Promote", name)
		}
		// Tokens rise in grant order (ForceReleaseThrough counts on it).
		for s := l.first; s != nil && s.next != nil; s = s.next {
			if s.next.token <= s.token {
				return fmt.Errorf("lock %q: holder %d has token %d after %d's %d", name, s.next.id, s.next.token, s.id, s.token)
			}
		}
		sharedWaiting := 0
		for w := l.head; w != nil; w = w.next {
			if w.shared {
				sharedWaiting++
			}
		}
		if shared+sharedWaiting != l.shared {
			return fmt.Errorf("lock %q: %d shared sessions, the count says %d", name, shared+sharedWaiting, l.shared)
		}
		n := 0
		var prev *session
		for w := l.head; w != nil; w = w.next {
			n++
			if w.prev != prev {
				return fmt.Errorf("lock %q: waiter %d has prev %v, want %v", name, w.id, w.prev, prev)
			}
			if w.held() || w.lock != l || t.sessions[w.id] != w {
				return fmt.Errorf("lock %q: waiter %d is held, of another lock, or not in the map", name, w.id)
			}
			// The queue is in ticket order (a table with tickets).
			if prev != nil && w.ticket != 0 && w.ticket <= prev.ticket {
				return fmt.Errorf("lock %q: waiter %d with ticket %d behind %d's %d", name, w.id, w.ticket, prev.id, prev.ticket)
			}
			prev = w
		}
		if l.tail != prev {
			return fmt.Errorf("lock %q: tail %v, want %v", name, l.tail, prev)
		}
		if n != l.waiters {
			return fmt.Errorf("lock %q: %d waiters linked, count says %d", name, n, l.waiters)
		}
	}
	listed := 0
	for _, l := range t.moving {
		if l.listed {
			listed++
		}
		if !l.listed {
			return fmt.Errorf("lock %q is in the list of moving queues but not marked listed", l.name)
		}
	}
	for _, l := range t.locks {
		if l.listed {
			listed--
		}
	}
	if listed < 0 {
		return fmt.Errorf("%d locks are marked listed but missing from the list of moving queues", -listed)
	}
	return nil
}

// checkIndex checks the maps that find a claim, and the count of the
// pending claims.
func (t *Table) checkIndex() error {
	if t.byToken == nil {
		return nil
	}
	holders, tickets, pending := 0, 0, 0
	leases := map[int64]int{}
	for _, s := range t.sessions {
		if s.held() {
			holders++
		}
		if s.ticket != 0 {
			tickets++
		}
		if s.pending {
			pending++
			leases[int64(s.lease)]++
		}
	}
	if len(t.byToken) != holders || len(t.byTicket) != tickets {
		return fmt.Errorf("index: %d tokens and %d tickets, want %d and %d", len(t.byToken), len(t.byTicket), holders, tickets)
	}
	if pending != t.pending || len(leases) != len(t.pendingLeases) {
		return fmt.Errorf("pending: %d claims with %d leases, the counts say %d and %d", pending, len(leases), t.pending, len(t.pendingLeases))
	}
	for lease, n := range t.pendingLeases {
		if leases[int64(lease)] != n {
			return fmt.Errorf("pending: %d claims with lease %v, the count says %d", leases[int64(lease)], lease, n)
		}
	}
	return nil
}

// holds reports whether s is one of l's holders.
func (l *lock) holds(s *session) bool {
	for h := l.first; h != nil; h = h.next {
		if h == s {
			return true
		}
	}
	return false
}
