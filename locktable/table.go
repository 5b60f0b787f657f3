// Package locktable holds the rules of Baton's named locks: one FIFO queue
// per name, grants, promotion, lease expiry, force-release, kick and fencing
// tokens. It is a pure state machine: every call takes the current time as an
// argument and returns what changed, so the server can tell each session what
// happened. It starts no goroutines, does no I/O, never reads the clock, and
// is not safe for concurrent use: the caller serialises calls.
package locktable

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// SessionID names a session; the caller chooses it and never reuses one.
type SessionID uint64

// Config holds the table's limits.
type Config struct {
	// MaxSessions is the most sessions (holders and waiters) in the table;
	// 0 means no limit.
	MaxSessions int
	// MaxWaitersPerLock is the longest queue of one lock; 0 means no limit.
	MaxWaitersPerLock int
	// NextToken returns the next fencing token. Each call must return a value
	// greater than every earlier one (also across restarts) and never 0.
	NextToken func() uint64
	// NoGrantBefore starts the table in a grace period: no lock is granted
	// before it, every session queues (a NoWait one is refused with
	// RefusedGrace), and the first Expire or Acquire at or after it grants
	// the head of every queue. The zero time means no grace period. It is
	// what keeps a restart after a crash from granting a lock that a client
	// of the crashed server may still believe it holds.
	NoGrantBefore time.Time
}

// Request is what a session asks for in its ACQUIRE.
type Request struct {
	Name   string
	Owner  string
	Lease  time.Duration // > 0
	NoWait bool
}

// Refusal says why Acquire turned a session away.
type Refusal uint8

// Refusals.
const (
	NotRefused Refusal = iota
	// RefusedBusy: NOWAIT and the lock is held.
	RefusedBusy
	// RefusedSessions: the table holds MaxSessions sessions.
	RefusedSessions
	// RefusedWaiters: the lock's queue holds MaxWaitersPerLock waiters.
	RefusedWaiters
	// RefusedGrace: NOWAIT during the grace period of Config.NoGrantBefore.
	RefusedGrace
)

func (r Refusal) String() string {
	switch r {
	case NotRefused:
		return "none"
	case RefusedBusy:
		return "busy"
	case RefusedSessions:
		return "sessions"
	case RefusedWaiters:
		return "waiters"
	case RefusedGrace:
		return "grace"
	}
	return fmt.Sprintf("refusal(%d)", uint8(r))
}

// State is a session's place: holder with its token, or waiter at a position.
type State struct {
	Held     bool
	Token    uint64 // holder only
	Position int    // waiter only: 1 = next to be promoted
}

// Cause says why a session left the table.
type Cause uint8

// Causes.
const (
	// CauseReleased: the caller ended the session (close, reset, error...).
	CauseReleased Cause = iota + 1
	// CauseExpired: silent for its full lease.
	CauseExpired
	// CauseForceReleased: an operator took the lock away from its holder.
	CauseForceReleased
	// CauseKicked: an operator removed the waiter from the queue.
	CauseKicked
	// CauseGraceEnded: nobody left; the grace period of
	// Config.NoGrantBefore ended and the head of a queue was granted.
	CauseGraceEnded
)

func (c Cause) String() string {
	switch c {
	case CauseReleased:
		return "released"
	case CauseExpired:
		return "expired"
	case CauseForceReleased:
		return "force_released"
	case CauseKicked:
		return "kicked"
	case CauseGraceEnded:
		return "grace_ended"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Exit is one session leaving the table, and the grant it caused. The
// exception is Cause CauseGraceEnded: no session left (Session is the zero
// Info) and Promoted is the head of a queue granted at the end of the grace
// period, so that callers handle every promotion in one place.
type Exit struct {
	Session Info  // the session as it was when it left; zero for CauseGraceEnded
	Cause   Cause // why it left
	// Promoted is the waiter that now holds the lock in its place; valid when
	// HasPromoted is true. Only a holder's exit, or the end of the grace
	// period, promotes.
	Promoted    Grant
	HasPromoted bool
}

// Grant is a waiter promoted to holder.
type Grant struct {
	ID     SessionID
	Name   string
	Token  uint64
	Waited time.Duration // from its ACQUIRE to the promotion
}

// Info describes a session for operators.
type Info struct {
	ID       SessionID
	Name     string
	Owner    string
	Lease    time.Duration
	Held     bool
	Token    uint64        // holder only
	Position int           // waiter only
	Since    time.Duration // how long it has held, or waited
	Silent   time.Duration // now - lastSeenAt
}

// LockInfo describes a lock that has a holder or waiters.
type LockInfo struct {
	Name    string
	Holder  *Info // nil during the grace period; otherwise never past a call
	Waiters []Info
}

// Errors of the operator calls.
var (
	ErrUnknownSession = errors.New("locktable: no such session")
	ErrHolder         = errors.New("locktable: session holds the lock")
	ErrNotHeld        = errors.New("locktable: lock not held")
	ErrDuplicate      = errors.New("locktable: session id already in use")
)

type lock struct {
	name       string
	holder     *session
	head, tail *session // the FIFO queue of waiters, linked through prev/next
	waiters    int
	// Removals from the queue, counted for the position cache (see state):
	// of the head, and from anywhere else but the tail.
	headRemovals, middleRemovals uint32
}

type session struct {
	id       SessionID
	lock     *lock
	owner    string
	lease    time.Duration
	lastSeen time.Time
	since    time.Time // ACQUIRE, or grant once held
	deadline time.Time // lastSeen + lease
	token    uint64    // non-zero once held
	prev     *session
	next     *session
	heapIdx  int
	// The position cache of a waiter; see state.
	posCache, posMid, posHead uint32
	posValid                  bool
}

func (s *session) held() bool { return s.token != 0 }

// Table is the lock table. The zero value is not usable; call New.
type Table struct {
	cfg      Config
	locks    map[string]*lock
	sessions map[SessionID]*session
	expiry   expiryHeap
	// graceUntil is Config.NoGrantBefore until the grace period has ended
	// (then zero): while it is set, no lock has a holder.
	graceUntil time.Time
}

// New returns an empty table.
func New(cfg Config) *Table {
	if cfg.NextToken == nil {
		panic("locktable: Config.NextToken is nil")
	}
	return &Table{
		cfg:        cfg,
		locks:      make(map[string]*lock),
		sessions:   make(map[SessionID]*session),
		graceUntil: cfg.NoGrantBefore,
	}
}

// Sessions is the number of sessions in the table.
func (t *Table) Sessions() int { return len(t.sessions) }

// Locks is the number of locks with a holder or a waiter.
func (t *Table) Locks() int { return len(t.locks) }

// Acquire enters session id into the table with its first frame, received
// at now. A free lock is granted at once; a held one queues the session,
// unless req.NoWait or a limit refuses it. A refused session is not entered.
// During the grace period (Config.NoGrantBefore) every session queues, and a
// NoWait one is refused with RefusedGrace.
//
// Every overdue session is expired first, as Expire(now) would, so a dead
// holder does not make a newcomer wait and dead sessions count against no
// limit; those exits (of any lock) are appended to dst.
func (t *Table) Acquire(now time.Time, id SessionID, req Request, dst []Exit) (State, Refusal, []Exit, error) {
	if _, dup := t.sessions[id]; dup {
		return State{}, NotRefused, dst, ErrDuplicate
	}
	if req.Lease <= 0 {
		return State{}, NotRefused, dst, fmt.Errorf("locktable: lease %v must be positive", req.Lease)
	}
	dst = t.Expire(now, dst)
	l := t.locks[req.Name]
	if t.cfg.MaxSessions > 0 && len(t.sessions) >= t.cfg.MaxSessions {
		return State{}, RefusedSessions, dst, nil
	}
	inGrace := !t.graceUntil.IsZero() // Expire has ended it if it is over
	if inGrace && req.NoWait {
		return State{}, RefusedGrace, dst, nil
	}
	if l != nil && (l.holder != nil || inGrace) {
		if req.NoWait {
			return State{}, RefusedBusy, dst, nil
		}
		if t.cfg.MaxWaitersPerLock > 0 && l.waiters >= t.cfg.MaxWaitersPerLock {
			return State{}, RefusedWaiters, dst, nil
		}
	}
	if l == nil {
		l = &lock{name: req.Name}
		t.locks[req.Name] = l
	}
	s := &session{
		id:       id,
		lock:     l,
		owner:    req.Owner,
		lease:    req.Lease,
		lastSeen: now,
		since:    now,
		deadline: now.Add(req.Lease),
	}
	t.sessions[id] = s
	t.expiry.push(s)
	if l.holder == nil && !inGrace {
		t.grant(now, s)
		return State{Held: true, Token: s.token}, NotRefused, dst, nil
	}
	l.enqueue(s)
	return State{Position: l.waiters}, NotRefused, dst, nil
}

// HolderOf returns the holder of lock name and how many sessions wait
// behind it; ok is false when nobody holds it.
func (t *Table) HolderOf(name string) (id SessionID, waiters int, ok bool) {
	l := t.locks[name]
	if l == nil || l.holder == nil {
		return 0, 0, false
	}
	return l.holder.id, l.waiters, true
}

// Seen records a complete frame from session id at now: its lease starts
// again in full. It returns the session's state, or false if the session is
// not in the table (it ended, or never entered) or its lease has already run
// out at now. Such a frame came too late: the session ended at its deadline,
// so it is neither revived nor confirmed, and the next Expire(now) removes it.
func (t *Table) Seen(now time.Time, id SessionID) (State, bool) {
	s := t.sessions[id]
	if s == nil || !s.deadline.After(now) {
		return State{}, false
	}
	if now.After(s.lastSeen) {
		s.lastSeen = now
		s.deadline = now.Add(s.lease)
		t.expiry.fix(s)
	}
	return t.state(s), true
}

// Release removes session id, appending its exit (and any exits it caused)
// to dst. If it held the lock, the head of the queue is promoted at once.
// It reports false if the session was not in the table.
func (t *Table) Release(now time.Time, id SessionID, dst []Exit) ([]Exit, bool) {
	s := t.sessions[id]
	if s == nil {
		return dst, false
	}
	return t.remove(now, s, CauseReleased, dst), true
}

// Expire removes every session whose lease has run out at now: silent for
// at least its lease. Exits are appended to dst. If the grace period ends
// at or before now, it then grants the head of every queue, in the order of
// the locks' names, each as an Exit with Cause CauseGraceEnded; waiters
// whose lease ran out during the grace period have left before.
func (t *Table) Expire(now time.Time, dst []Exit) []Exit {
	for len(t.expiry) > 0 && !t.expiry[0].deadline.After(now) {
		dst = t.remove(now, t.expiry[0], CauseExpired, dst)
	}
	if !t.graceUntil.IsZero() && !now.Before(t.graceUntil) {
		dst = t.endGrace(now, dst)
	}
	return dst
}

// endGrace ends the grace period and grants the head of every queue.
func (t *Table) endGrace(now time.Time, dst []Exit) []Exit {
	t.graceUntil = time.Time{}
	names := make([]string, 0, len(t.locks))
	for name, l := range t.locks {
		if l.holder == nil && l.head != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names) // a fixed order, for tests and logs
	for _, name := range names {
		l := t.locks[name]
		w := l.head
		l.unlink(w)
		waited := now.Sub(w.since)
		t.grant(now, w)
		dst = append(dst, Exit{
			Cause:       CauseGraceEnded,
			Promoted:    Grant{ID: w.id, Name: name, Token: w.token, Waited: waited},
			HasPromoted: true,
		})
	}
	return dst
}

// GraceUntil is the end of the grace period (Config.NoGrantBefore); false
// when there is none or it has ended.
func (t *Table) GraceUntil() (time.Time, bool) {
	return t.graceUntil, !t.graceUntil.IsZero()
}

// NextDeadline is the earliest time at which Expire has work: a session
// would expire, if nothing is heard from it, or the grace period ends;
// false when the table is empty and no grace period is pending.
func (t *Table) NextDeadline() (time.Time, bool) {
	next, ok := t.graceUntil, !t.graceUntil.IsZero()
	if len(t.expiry) > 0 && (!ok || t.expiry[0].deadline.Before(next)) {
		next, ok = t.expiry[0].deadline, true
	}
	return next, ok
}

// ForceRelease takes the lock name from its holder and promotes the next
// waiter. It returns ErrNotHeld when nobody holds it.
func (t *Table) ForceRelease(now time.Time, name string, dst []Exit) ([]Exit, error) {
	l := t.locks[name]
	if l == nil || l.holder == nil {
		return dst, ErrNotHeld
	}
	return t.remove(now, l.holder, CauseForceReleased, dst), nil
}

// Kick removes waiter id from its queue. It returns ErrUnknownSession for a
// session not in the table and ErrHolder for a holder (use ForceRelease).
func (t *Table) Kick(now time.Time, id SessionID, dst []Exit) ([]Exit, error) {
	s := t.sessions[id]
	if s == nil {
		return dst, ErrUnknownSession
	}
	if s.held() {
		return dst, ErrHolder
	}
	return t.remove(now, s, CauseKicked, dst), nil
}

// Session describes session id at now.
func (t *Table) Session(now time.Time, id SessionID) (Info, bool) {
	s := t.sessions[id]
	if s == nil {
		return Info{}, false
	}
	return t.info(now, s), true
}

// Lock describes lock name at now; false if nobody holds or waits.
func (t *Table) Lock(now time.Time, name string) (LockInfo, bool) {
	l := t.locks[name]
	if l == nil {
		return LockInfo{}, false
	}
	return t.lockInfo(now, l), true
}

// Snapshot describes every lock at now, sorted by name.
func (t *Table) Snapshot(now time.Time) []LockInfo {
	out := make([]LockInfo, 0, len(t.locks))
	for _, l := range t.locks {
		out = append(out, t.lockInfo(now, l))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names appends the name of every lock with a holder or a waiter to dst,
// in no order.
func (t *Table) Names(dst []string) []string {
	for name := range t.locks {
		dst = append(dst, name)
	}
	return dst
}

// LockPage describes lock name at now with at most max of its waiters,
// and reports whether more follow: a caller that must not hold up the
// table for a long queue reads it a page at a time. The page starts after
// waiter after, the last of the previous page (0: at the head), when that
// session still waits for name; otherwise after skip waiters from the head
// (the page before moved meanwhile). Positions count from skip. False if
// nobody holds or waits.
func (t *Table) LockPage(now time.Time, name string, after SessionID, skip, max int) (li LockInfo, more, ok bool) {
	l := t.locks[name]
	if l == nil {
		return LockInfo{}, false, false
	}
	li = LockInfo{Name: l.name, Waiters: make([]Info, 0, min(max, l.waiters))}
	if l.holder != nil {
		h := t.info(now, l.holder)
		li.Holder = &h
	}
	w := l.head
	if s := t.sessions[after]; after != 0 && s != nil && s.lock == l && !s.held() {
		w = s.next
	} else {
		for i := 0; w != nil && i < skip; i++ {
			w = w.next
		}
	}
	for pos := skip; w != nil && len(li.Waiters) < max; w = w.next {
		pos++
		li.Waiters = append(li.Waiters, infoAt(now, w, State{Position: pos}))
	}
	return li, w != nil, true
}

func (t *Table) lockInfo(now time.Time, l *lock) LockInfo {
	li := LockInfo{Name: l.name, Waiters: make([]Info, 0, l.waiters)}
	if l.holder != nil {
		h := t.info(now, l.holder)
		li.Holder = &h
	}
	pos := 0
	for w := l.head; w != nil; w = w.next {
		pos++
		li.Waiters = append(li.Waiters, infoAt(now, w, State{Position: pos}))
	}
	return li
}

func (t *Table) info(now time.Time, s *session) Info { return infoAt(now, s, t.state(s)) }

// infoAt describes s in state st. lockInfo passes the position it counted,
// so that describing a queue walks it once, not once per waiter.
func infoAt(now time.Time, s *session, st State) Info {
	return Info{
		ID:       s.id,
		Name:     s.lock.name,
		Owner:    s.owner,
		Lease:    s.lease,
		Held:     st.Held,
		Token:    st.Token,
		Position: st.Position,
		Since:    nonNegative(now.Sub(s.since)),
		Silent:   nonNegative(now.Sub(s.lastSeen)),
	}
}

func nonNegative(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// state computes s's state. A waiter's position is asked on every
// heartbeat. It is cached, and the cache stays valid while the queue only
// loses its head (every position then drops by one: the common case, a
// handover) or gains a tail; a removal from the middle makes the next
// question walk to the head once.
func (t *Table) state(s *session) State {
	if s.held() {
		return State{Held: true, Token: s.token}
	}
	l := s.lock
	if s.posValid && s.posMid == l.middleRemovals {
		return State{Position: int(s.posCache - (l.headRemovals - s.posHead))}
	}
	pos := 1
	for w := s.prev; w != nil; w = w.prev {
		pos++
	}
	s.posCache, s.posMid, s.posHead, s.posValid = uint32(pos), l.middleRemovals, l.headRemovals, true
	return State{Position: pos}
}

func (t *Table) grant(now time.Time, s *session) {
	tok := t.cfg.NextToken()
	if tok == 0 {
		panic("locktable: NextToken returned 0")
	}
	s.token = tok
	s.since = now
	s.lock.holder = s
}

// remove takes s out of the table and, if it held its lock, promotes the
// first waiter that is not itself overdue (overdue ones expire on the way).
func (t *Table) remove(now time.Time, s *session, cause Cause, dst []Exit) []Exit {
	exit := Exit{Session: t.info(now, s), Cause: cause}
	l := s.lock
	t.expiry.remove(s)
	delete(t.sessions, s.id)
	if !s.held() {
		l.unlink(s)
		dst = append(dst, exit)
		t.dropIfEmpty(l)
		return dst
	}
	l.holder = nil
	// Expire overdue waiters first, as their own exits, so a waiter that
	// has been silent for its lease never gets the lock.
	var overdue []Exit
	overdue = t.expireOverdueWaiters(now, l, overdue)
	if w := l.head; w != nil {
		l.unlink(w)
		waited := now.Sub(w.since)
		t.grant(now, w)
		exit.Promoted = Grant{ID: w.id, Name: l.name, Token: w.token, Waited: waited}
		exit.HasPromoted = true
	}
	dst = append(dst, exit)
	dst = append(dst, overdue...)
	t.dropIfEmpty(l)
	return dst
}

// expireOverdueWaiters expires the waiters at the head of l's queue whose
// lease has run out, so the next promotion goes to a live one. Overdue
// waiters further back are left to Expire: only the head can be promoted,
// and walking the whole queue would make every handover O(queue).
func (t *Table) expireOverdueWaiters(now time.Time, l *lock, dst []Exit) []Exit {
	for w := l.head; w != nil && !w.deadline.After(now); w = l.head {
		dst = append(dst, Exit{Session: t.info(now, w), Cause: CauseExpired})
		t.expiry.remove(w)
		delete(t.sessions, w.id)
		l.unlink(w)
	}
	return dst
}

func (t *Table) dropIfEmpty(l *lock) {
	if l.holder == nil && l.head == nil {
		delete(t.locks, l.name)
	}
}

func (l *lock) enqueue(s *session) {
	s.prev, s.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = s
	} else {
		l.head = s
	}
	l.tail = s
	l.waiters++
}

func (l *lock) unlink(s *session) {
	switch {
	case s == l.head:
		l.headRemovals++
	case s != l.tail:
		l.middleRemovals++
	}
	s.posValid = false
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		l.tail = s.prev
	}
	s.prev, s.next = nil, nil
	l.waiters--
}
