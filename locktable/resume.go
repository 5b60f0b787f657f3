package locktable

import (
	"errors"
	"fmt"
	"time"
)

// Claims that go on (protocol version 3). A claim is carried from one
// session to another, or from one term to the next, and keeps what it had:
// a holder its token and its slot, a waiter its ticket and so its place.
// Three ways in: Resume moves a claim the table has to a new session, or,
// during the grace period after a crash, admits one of an earlier term;
// AddPending enters the claims a planned handover listed, which keep their
// slots and places until they come back or their time runs out. And a
// claim being ended can be frozen first (Freeze), so that nothing confirms
// or moves it while its end is recorded.
//
// A holder that comes back is never a new grant: it keeps its token, and
// takes its token's place among the name's holders. If the holders that
// come back cannot all hold (which only a claim its server ended without
// its client learning of it can cause), the higher tokens win (see
// Resume).

// Claim is a claim that goes on on a new session: a holder with its token,
// or a waiter with its ticket.
type Claim struct {
	// Request is the claim as it was made: Name, Lease, Shared and Limit
	// are those it was granted or queued with (the credential covers
	// them); Owner is the new session's. NoWait is not looked at.
	Request
	// Token is a holder's token; 0 for a waiter.
	Token uint64
	// Ticket is a waiter's ticket: its place. A holder granted from the
	// queue may have one too (the one it waited with); 0 if none.
	Ticket uint64
	// Attempt is the number of the resume that carries the claim: it
	// moves only to a higher one, so an older attempt answered late never
	// takes it back.
	Attempt uint32
}

// Resume continues claim c on session id, from a resume received at now,
// and reports the session's state, or why it is refused (a refused session
// is not entered). Every overdue session is expired first, as by Acquire.
//
// The claim is in the table (on another session, or pending): it moves to
// id in one step, and the session it was on leaves with CauseMoved,
// releasing nothing; the two are never both counted, and the claim is
// never uncounted. Its lease starts again at now. A waiter granted
// meanwhile is answered as a holder, with the token of its grant. A
// pending waiter at the head that comes back may let the queue move: it is
// granted (in the State) and the others in the Moved exit's Promoted. It is
// refused if it was revoked (RefusedRevoked), is frozen (RefusedFrozen), if
// c.Attempt is not above the claim's (RefusedAttempt), or if c differs from
// it in name, kind, limit or lease (RefusedResume).
//
// The claim is not in the table: during the grace period, a claim of an
// earlier term (its token, or ticket, below Config.ResumeBelow) comes back.
// A holder holds again with its token, beside new grants that wait; past
// MaxSessions too. If the name's holders then cannot all hold, they are
// taken in token order, highest first, and a claim is kept if the name's
// rules allow it beside those kept: an exclusive one if none is, a shared
// one if no exclusive one is, its limit is that of the shared ones kept,
// and fewer than that many are; the others leave with CauseSuperseded, or,
// if it is the one that came back, it is refused with RefusedSuperseded.
// The caller records the ends of the losers before it answers the winner.
// A waiter takes its ticket's place; it is refused (RefusedLimit) if it is
// shared with a limit other than that of the name's holders or of a waiter
// that came back before it; refused if the table is full
// (RefusedSessions); and if the queue is full, the waiter with the newest
// ticket leaves instead (CauseOverloaded), or, if that is the one that came
// back, it is refused (RefusedWaiters). A shared claim that comes back
// keeps the name's limit: the waiters that queued in this term with
// another limit leave (CauseLimitOverruled), as, for a holder, every
// waiter whose limit differs from that of the holders kept.
//
// Otherwise, the claim ended here (one that came back in this grace and
// ended since is refused again; RefusedSuperseded if it lost a conflict),
// was not listed, or the grace period is over: RefusedResume.
//
// The caller has checked the credential and the access rules, and refuses
// first a claim whose end the cluster recorded (an operator's release or
// kick, a conflict lost in an earlier term): a table that starts anew
// cannot know of it.
func (t *Table) Resume(now time.Time, id SessionID, c Claim, dst []Exit) (State, Refusal, []Exit, error) {
	if err := t.checkClaim(id, c); err != nil {
		return State{}, NotRefused, dst, err
	}
	t.begin()
	dst = t.expire(now, dst)
	if s := t.find(c); s != nil {
		switch {
		case !s.matches(c):
			return State{}, RefusedResume, dst, nil
		case s.revoked:
			return State{}, RefusedRevoked, dst, nil
		case s.isFrozen():
			return State{}, RefusedFrozen, dst, nil
		case c.Attempt <= s.attempt:
			return State{}, RefusedAttempt, dst, nil
		}
		st, dst := t.move(now, s, id, c, dst)
		return st, NotRefused, dst, nil
	}
	if t.graceUntil.IsZero() || c.id() >= t.cfg.ResumeBelow {
		return State{}, RefusedResume, dst, nil
	}
	if refusal, ok := t.ended[c.key()]; ok {
		return State{}, refusal, dst, nil
	}
	s, refusal, dst := t.admit(now, id, c, false, now.Add(c.Lease), dst)
	if refusal != NotRefused {
		return State{}, refusal, dst, nil
	}
	return t.state(s), NotRefused, dst, nil
}

// AddPending enters claim c, listed by a planned handover, as session id,
// which has no connection: a holder keeps its slot and a waiter its place
// until Resume moves the claim to a session, or until its time runs out at
// until (it then expires; nothing confirms it meanwhile). A pending claim
// is never granted: a pending waiter stops its queue, as a waiter that may
// not hold. It counts as a session, as a holder for the name's slots, and
// for the name's limit (PendingClaims tells what they hold the table to);
// no cap refuses it. Its token and ticket are of earlier terms.
//
// The handover's table obeyed every rule, so a list enters whole; a claim
// that breaks one (a list that is not one table's) is dealt with as a
// Resume after a crash would: RefusedSuperseded, RefusedLimit,
// RefusedFrozen, and exits of CauseSuperseded or CauseLimitOverruled.
func (t *Table) AddPending(now time.Time, id SessionID, c Claim, until time.Time, dst []Exit) (Refusal, []Exit, error) {
	if err := t.checkClaim(id, c); err != nil {
		return NotRefused, dst, err
	}
	if t.byToken[c.Token] != nil && c.Token != 0 || t.byTicket[c.Ticket] != nil && c.Ticket != 0 {
		return NotRefused, dst, ErrDuplicateClaim
	}
	t.begin()
	_, refusal, dst := t.admit(now, id, c, true, until, dst)
	return refusal, dst, nil
}

// Holds reports whether claim c is in the table, on a session or pending
// (by its token, or its ticket): a resume of it is a move. The caller
// checks what a fresh table cannot know (a recorded end) only for a claim
// it does not hold.
func (t *Table) Holds(c Claim) bool { return t.byToken != nil && t.find(c) != nil }

// PendingClaims is the number of pending claims and the longest lease
// among them: while n > 0 the term has claims not accounted for, and a
// lease bound may not be lowered below longest.
func (t *Table) PendingClaims() (n int, longest time.Duration) {
	for lease := range t.pendingLeases {
		longest = max(longest, lease)
	}
	return t.pending, longest
}

// Freeze marks session id as being ended (a release or kick accepted, its
// record not yet committed): Seen confirms it no more (State.Frozen),
// Resume refuses to move it, and a frozen waiter is not granted (its queue
// waits behind it). It stays frozen until it ends: the caller ends it once
// the record is committed. ErrUnknownSession if id is not in the table.
func (t *Table) Freeze(id SessionID) error {
	s := t.sessions[id]
	if s == nil {
		return ErrUnknownSession
	}
	s.frozen = true
	if l := s.lock; s == l.head {
		l.moving = false // its entry in t.moving is skipped
	}
	return nil
}

// FreezeThrough freezes, as Freeze, every holder of lock name whose token is
// at most through (the token NewestToken gave): the holders a release of
// the name ends (ForceReleaseThrough with the same through). A holder that
// comes back later with such a token is refused too. ErrNotHeld if nobody
// holds or waits for name.
func (t *Table) FreezeThrough(name string, through uint64) error {
	l := t.locks[name]
	if l == nil {
		return ErrNotHeld
	}
	l.frozenThrough = max(l.frozenThrough, through)
	return nil
}

// checkClaim checks what a caller must get right: a new id, a lease, a
// limit, a token or ticket, and a table with tickets.
func (t *Table) checkClaim(id SessionID, c Claim) error {
	switch {
	case t.cfg.NextTicket == nil:
		return errors.New("locktable: Config.NextTicket is nil: a table without tickets takes no claim that goes on")
	case t.sessions[id] != nil:
		return ErrDuplicate
	case c.Lease <= 0:
		return fmt.Errorf("locktable: lease %v must be positive", c.Lease)
	case c.Shared && c.Limit < 1:
		return fmt.Errorf("locktable: limit %d of a shared claim must be at least 1", c.Limit)
	case c.Token == 0 && c.Ticket == 0:
		return errors.New("locktable: a claim that goes on has a token or a ticket")
	}
	return nil
}

// id is what names c: a holder's token, or a waiter's ticket.
func (c Claim) id() uint64 {
	if c.Token != 0 {
		return c.Token
	}
	return c.Ticket
}

// claimKey names a claim by its token, or (waiter) its ticket: two counters,
// whose values may meet.
type claimKey struct {
	id     uint64
	waiter bool
}

func (c Claim) key() claimKey { return claimKey{c.id(), c.Token == 0} }

// bury notes that carried claim s ended in the grace period: a resume of it
// (by its token, or its ticket) gets refusal.
func (t *Table) bury(s *session, refusal Refusal) {
	if t.ended == nil {
		t.ended = make(map[claimKey]Refusal)
	}
	if s.token != 0 {
		t.ended[claimKey{s.token, false}] = refusal
	}
	if s.ticket != 0 {
		t.ended[claimKey{s.ticket, true}] = refusal
	}
}

// find is the session of claim c in the table, by its token (a holder) or
// its ticket (a waiter, or the holder it became); nil if none.
func (t *Table) find(c Claim) *session {
	if c.Token != 0 {
		return t.byToken[c.Token]
	}
	return t.byTicket[c.Ticket]
}

// matches reports whether c is the claim s is: the same name, kind, limit
// and lease.
func (s *session) matches(c Claim) bool {
	return s.lock.name == c.Name && s.shared == c.Shared && s.lease == c.Lease && (!s.shared || s.limit == c.Limit)
}

// move rebinds s to session id: the session it was on leaves (CauseMoved)
// and releases nothing. A pending waiter at the head that comes back may
// hold: it is granted, and the queue behind it moves.
func (t *Table) move(now time.Time, s *session, id SessionID, c Claim, dst []Exit) (State, []Exit) {
	l := s.lock
	exit := Exit{Session: t.info(now, s), Cause: CauseMoved, Lock: l.name}
	delete(t.sessions, s.id)
	s.id = id
	t.sessions[id] = s
	s.owner = c.Owner
	s.attempt = c.Attempt
	s.resumed = true
	wasPending := s.pending
	if wasPending {
		t.unpend(s)
	}
	s.lastSeen = now
	s.deadline = now.Add(s.lease)
	t.expiry.fix(s)
	var overdue []Exit
	if wasPending && s == l.head && t.graceUntil.IsZero() && l.mayGrant(s) {
		// Its own grant is the answer to the resume, as an ACQUIRE's.
		l.unlink(s)
		t.grant(now, s)
		overdue = t.moveQueue(now, l, &exit, overdue)
	}
	exit.Moving = l.moving
	dst = append(dst, exit)
	dst = append(dst, overdue...)
	return t.state(s), dst
}

// admit enters claim c, which is not in the table, as session id: carried
// in, with its token or ticket, pending or not (until is when its lease
// runs out). It applies the rules of conflicts, limits and, for a claim
// that is not pending, caps (see Resume). Outside the grace period a queue
// that may move then moves, in an exit of CauseQueueMoved.
func (t *Table) admit(now time.Time, id SessionID, c Claim, pending bool, until time.Time, dst []Exit) (*session, Refusal, []Exit) {
	l := t.locks[c.Name]
	if l == nil {
		l = &lock{name: c.Name} // entered below, if c is
	}
	var leave []*session // the sessions that give way to c, in this order
	causes := map[*session]Cause{}
	giveWay := func(s *session, cause Cause) {
		if _, ok := causes[s]; !ok {
			leave = append(leave, s)
			causes[s] = cause
		}
	}
	keptLimit := 0 // the limit of the shared holders kept, if any
	if held := c.Token != 0; held {
		if c.Token <= l.frozenThrough {
			return nil, RefusedFrozen, dst
		}
		kept, losers, limit := l.conflict(c)
		if !kept {
			return nil, RefusedSuperseded, dst
		}
		for _, h := range losers {
			giveWay(h, CauseSuperseded)
		}
		keptLimit = limit
	} else if c.Shared {
		for h := l.first; h != nil; h = h.next {
			if h.shared && h.limit != c.Limit {
				return nil, RefusedLimit, dst
			}
		}
		for w := l.head; w != nil; w = w.next {
			if w.shared && w.carried && w.limit != c.Limit {
				return nil, RefusedLimit, dst
			}
		}
		keptLimit = c.Limit
	}
	if keptLimit != 0 {
		for w := l.head; w != nil; w = w.next {
			if w.shared && w.limit != keptLimit {
				giveWay(w, CauseLimitOverruled)
			}
		}
	}
	if c.Token == 0 && !pending {
		if t.cfg.MaxSessions > 0 && len(t.sessions)-len(leave) >= t.cfg.MaxSessions {
			return nil, RefusedSessions, dst
		}
		if t.cfg.MaxWaitersPerLock > 0 && l.waiters-len(leave) >= t.cfg.MaxWaitersPerLock {
			// Make room by the newest ticket: the waiter that came last
			// leaves, unless that is c.
			newest := l.tail
			for newest != nil && causes[newest] != 0 {
				newest = newest.prev
			}
			if newest == nil || newest.ticket < c.Ticket {
				return nil, RefusedWaiters, dst
			}
			giveWay(newest, CauseOverloaded)
		}
	}
	t.locks[c.Name] = l
	for _, x := range leave {
		dst = t.drop(now, x, causes[x], dst)
	}
	s := &session{
		id:       id,
		lock:     l,
		owner:    c.Owner,
		shared:   c.Shared,
		lease:    c.Lease,
		lastSeen: until.Add(-c.Lease),
		since:    now,
		deadline: until,
		token:    c.Token,
		ticket:   c.Ticket,
		attempt:  c.Attempt,
		pending:  pending,
		carried:  true,
		resumed:  !pending,
	}
	if c.Shared {
		s.limit = c.Limit
		l.limit = c.Limit
		l.shared++
	}
	t.sessions[id] = s
	t.expiry.push(s)
	if s.token != 0 {
		t.byToken[s.token] = s
	}
	if s.ticket != 0 {
		t.byTicket[s.ticket] = s
	}
	if pending {
		t.pend(s)
	}
	if s.held() {
		l.insertHolder(s)
	} else {
		l.insertWaiter(s)
	}
	if t.graceUntil.IsZero() {
		// What left may have let the queue in, and a waiter that came to
		// the head of a queue left moving may have stopped it.
		exit := Exit{Cause: CauseQueueMoved, Lock: l.name}
		overdue := t.moveQueue(now, l, &exit, nil)
		if exit.Moving = l.moving; len(exit.Promoted) > 0 {
			dst = append(dst, exit)
		}
		dst = append(dst, overdue...)
	}
	return s, NotRefused, dst
}

// conflict applies the rule of conflicts to l's holders and holder c:
// taken in token order, highest first, a claim is kept if an exclusive
// one, when none is kept; if a shared one, when no exclusive one is kept,
// its limit is that of the shared ones kept, and fewer than that many are.
// It reports whether c is kept, the holders that are not (in token order),
// and the limit of the shared holders kept (0 if none).
func (l *lock) conflict(c Claim) (kept bool, losers []*session, limit int) {
	exclusive, shared := false, 0
	keep := func(isShared bool, lim int) bool {
		switch {
		case !isShared:
			if exclusive || shared > 0 {
				return false
			}
			exclusive = true
		case exclusive, shared > 0 && lim != limit, shared >= lim:
			return false
		default:
			shared++
			limit = lim
		}
		return true
	}
	placed := false
	for h := l.last; ; h = h.prev {
		if !placed && (h == nil || h.token < c.Token) {
			kept, placed = keep(c.Shared, c.Limit), true
		}
		if h == nil {
			break
		}
		if !keep(h.shared, h.limit) {
			losers = append(losers, h)
		}
	}
	for i, j := 0, len(losers)-1; i < j; i, j = i+1, j-1 {
		losers[i], losers[j] = losers[j], losers[i]
	}
	return kept, losers, limit
}

// drop takes s out of the table with cause, and moves no queue: the caller
// does, once what it changes is in place.
func (t *Table) drop(now time.Time, s *session, cause Cause, dst []Exit) []Exit {
	l := s.lock
	exit := Exit{Session: t.info(now, s), Cause: cause, Lock: l.name}
	t.forget(s)
	if cause == CauseSuperseded && !t.graceUntil.IsZero() {
		t.bury(s, RefusedSuperseded)
	}
	if s.held() {
		l.removeHolder(s)
	} else {
		l.unlink(s)
	}
	if s.shared {
		l.shared--
	}
	return append(dst, exit)
}

func (t *Table) pend(s *session) {
	t.pending++
	t.pendingLeases[s.lease]++
}

// unpend counts pending claim s out: it came back, or leaves.
func (t *Table) unpend(s *session) {
	s.pending = false
	t.pending--
	if t.pendingLeases[s.lease]--; t.pendingLeases[s.lease] == 0 {
		delete(t.pendingLeases, s.lease)
	}
}

// insertHolder puts s among l's holders at its token's place, looking
// from the newest (a claim that comes back is older than the grants).
func (l *lock) insertHolder(s *session) {
	at := l.last
	for at != nil && at.token > s.token {
		at = at.prev
	}
	l.linkAfter(s, at, &l.first, &l.last)
	l.holders++
}

// insertWaiter puts s in l's queue at its ticket's place, looking from the
// tail: a waiter that comes back goes in front of every waiter that came
// after it.
func (l *lock) insertWaiter(s *session) {
	at := l.tail
	for at != nil && at.ticket > s.ticket {
		at = at.prev
	}
	if at == l.tail {
		l.enqueue(s)
		return
	}
	l.middleChanges++ // every position behind s moves
	s.posValid = false
	l.linkAfter(s, at, &l.head, &l.tail)
	l.waiters++
}

// linkAfter links s after at (first if at is nil) in the list whose ends
// are first and last.
func (l *lock) linkAfter(s, at *session, first, last **session) {
	s.prev = at
	if at != nil {
		s.next = at.next
		at.next = s
	} else {
		s.next = *first
		*first = s
	}
	if s.next != nil {
		s.next.prev = s
	} else {
		*last = s
	}
}
