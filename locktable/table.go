// Package locktable holds the rules of Baton's named locks: one FIFO queue
// and a set of holders per name, exclusive and shared claims, grants,
// promotion, lease expiry, force-release, kick and fencing tokens. It is a
// pure state machine: every call takes the current time as an argument and
// returns what changed, so the server can tell each session what happened.
// It starts no goroutines, does no I/O, never reads the clock, and is not
// safe for concurrent use: the caller serialises calls.
//
// The grant rule: the queue is served strictly in order, and nobody
// overtakes. The head of the queue is granted as soon as it may hold, then
// the next head, and so on. An exclusive claim may hold when the name has
// no holder; a shared claim may hold when no exclusive claim holds the name
// and fewer than the name's limit of shared claims do. The limit belongs to
// the name while it has shared sessions (holding or waiting): a shared
// claim with another limit is refused, and after the last shared session
// the next shared claim sets it anew. With exclusive claims only, a name
// is a mutex with a FIFO queue.
//
// Work in steps: a name may have thousands of holders, and a writer that
// leaves may let thousands of readers in. So that no call takes long (the
// caller serialises every call, and so waits for the longest), a call makes
// at most Config.GrantStep grants; a queue that could move further is left
// moving, and Promote moves it on, a step at a time, in the same order. And
// ForceReleaseThrough takes a name from its holders a step at a time. Every
// step leaves the table consistent: the limit is never exceeded, grants
// keep queue order and rising tokens, and a claim that comes meanwhile
// queues behind a moving queue, as behind any.
package locktable

import (
	"errors"
	"fmt"
	"math"
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
	// GrantStep is the most grants one call makes (an overdue head that
	// expires on the way counts as one); 0 means no bound. A queue that
	// could move further is left moving (Moving), for Promote.
	GrantStep int
}

// Request is what a session asks for in its ACQUIRE.
type Request struct {
	Name   string
	Owner  string
	Lease  time.Duration // > 0
	NoWait bool
	// Shared makes a shared claim: it holds the name together with other
	// shared claims, at most Limit of them. False is an exclusive claim,
	// which holds the name alone.
	Shared bool
	// Limit is a shared claim's limit, 1 or more; an exclusive claim's is
	// not looked at.
	Limit int
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
	// RefusedLimit: a shared claim whose Limit differs from the limit in
	// force for the name (see Table.Limit). It is checked before every
	// other refusal: it is the client's configuration, not a passing state.
	RefusedLimit
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
	case RefusedLimit:
		return "limit"
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
	// CauseQueueMoved: nobody left; Promote moved on a queue that an
	// earlier call left moving (Config.GrantStep).
	CauseQueueMoved
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
	case CauseQueueMoved:
		return "queue_moved"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Exit is one session leaving the table, and the grants it caused. The
// exceptions are Causes CauseGraceEnded and CauseQueueMoved: no session
// left (Session is the zero Info) and Promoted are the heads of a queue
// granted at the end of the grace period, or by Promote, so that callers
// handle every promotion in one place.
type Exit struct {
	Session Info  // the session as it was when it left; zero for CauseGraceEnded and CauseQueueMoved
	Cause   Cause // why it left
	// Lock is the name of the lock whose session left, or whose queue moved.
	Lock string
	// Moving says that after this exit the lock's queue is left moving:
	// its head may hold, and Promote grants it (see Config.GrantStep).
	Moving bool
	// Promoted are the waiters that now hold the lock because this session
	// left, in queue order (so their tokens rise in that order): none, one
	// (the next holder of a mutex), or several (shared claims that stood
	// behind an exclusive holder, or behind a waiter that left the head).
	// It is the table's scratch: valid until the next call that changes the
	// table (Acquire, Release, Expire, Promote, ForceReleaseThrough,
	// ForceReleaseSession, Kick).
	Promoted []Grant
}

// Grant is a waiter promoted to holder.
type Grant struct {
	ID     SessionID
	Name   string
	Token  uint64
	Shared bool          // a shared claim
	Waited time.Duration // from its ACQUIRE to the promotion
}

// Info describes a session for operators.
type Info struct {
	ID       SessionID
	Name     string
	Owner    string
	Lease    time.Duration
	Shared   bool // a shared claim
	Held     bool
	Token    uint64        // holder only
	Position int           // waiter only
	Since    time.Duration // how long it has held, or waited
	Silent   time.Duration // now - lastSeenAt
}

// LockInfo describes a lock that has a holder or waiters.
type LockInfo struct {
	Name string
	// Holder is the first holder (Holders[0]); nil when none holds it,
	// which outside the grace period is only between calls, never past one.
	Holder *Info
	// Holders are every holder, in grant order: one exclusive claim, or up
	// to Limit shared ones.
	Holders []Info
	// Limit is the limit in force for shared claims while the name has
	// shared sessions, holding or waiting; 0 when it has none.
	Limit   int
	Waiters []Info
}

// Errors of the operator calls.
var (
	ErrUnknownSession = errors.New("locktable: no such session")
	ErrHolder         = errors.New("locktable: session holds the lock")
	ErrWaiter         = errors.New("locktable: session waits for the lock")
	ErrNotHeld        = errors.New("locktable: lock not held")
	ErrDuplicate      = errors.New("locktable: session id already in use")
)

type lock struct {
	name string
	// The holders, in grant order, linked through prev/next (a session is
	// a holder or a waiter, never both, so one pair of links serves both
	// lists).
	first, last *session
	holders     int
	head, tail  *session // the FIFO queue of waiters, linked through prev/next
	waiters     int
	// shared counts the shared sessions, holding or waiting; limit is the
	// name's limit while it is positive.
	shared int
	limit  int
	// Removals from the queue, counted for the position cache (see state):
	// of the head, and from anywhere else but the tail.
	headRemovals, middleRemovals uint32
	// moving: the queue stopped at Config.GrantStep grants with a head
	// that may hold, and Promote moves it on. listed: the lock is in
	// Table.moving (where it keeps its place if it stops moving and then
	// is left moving again before Promote comes to it).
	moving, listed bool
}

// exclusivelyHeld reports whether an exclusive claim holds l (it is then
// the only holder).
func (l *lock) exclusivelyHeld() bool { return l.first != nil && !l.first.shared }

// mayHold reports whether a claim, shared or not with limit, may hold l
// now by the holders alone (the queue is the caller's business).
func (l *lock) mayHold(shared bool, limit int) bool {
	if !shared {
		return l.holders == 0
	}
	return !l.exclusivelyHeld() && l.holders < limit
}

type session struct {
	id       SessionID
	lock     *lock
	owner    string
	shared   bool
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
	// grants backs the Promoted slices of the exits of one call; emptied
	// at the start of the next call that changes the table.
	grants []Grant
	// budget is how many grants the current call may still make (see
	// Config.GrantStep).
	budget int
	// moving lists the locks whose queue a call left moving, in the order
	// they were left; an entry whose lock has since stopped moving (or left
	// the table) is skipped.
	moving []*lock
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

// begin starts a call that changes the table: the grants of the previous
// one are forgotten, and the call's budget of grants is full.
func (t *Table) begin() {
	t.grants = t.grants[:0]
	t.budget = t.cfg.GrantStep
	if t.budget <= 0 {
		t.budget = math.MaxInt
	}
}

// Sessions is the number of sessions in the table.
func (t *Table) Sessions() int { return len(t.sessions) }

// Locks is the number of locks with a holder or a waiter.
func (t *Table) Locks() int { return len(t.locks) }

// Acquire enters session id into the table with its first frame, received
// at now. A claim that may hold at once (the queue is empty and the holders
// leave room for it, see the package doc) is granted; any other is queued
// at the tail, unless req.NoWait or a limit refuses it. A refused session
// is not entered, and sets nothing (not the name's limit). During the grace
// period (Config.NoGrantBefore) every session queues, and a NoWait one is
// refused with RefusedGrace.
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
	if req.Shared && req.Limit < 1 {
		return State{}, NotRefused, dst, fmt.Errorf("locktable: limit %d of a shared claim must be at least 1", req.Limit)
	}
	t.begin()
	dst = t.expire(now, dst)
	l := t.locks[req.Name]
	if req.Shared && l != nil && l.shared > 0 && l.limit != req.Limit {
		return State{}, RefusedLimit, dst, nil
	}
	if t.cfg.MaxSessions > 0 && len(t.sessions) >= t.cfg.MaxSessions {
		return State{}, RefusedSessions, dst, nil
	}
	inGrace := !t.graceUntil.IsZero() // expire has ended it if it is over
	if inGrace && req.NoWait {
		return State{}, RefusedGrace, dst, nil
	}
	// Nobody overtakes: a claim holds at once only behind an empty queue.
	holdNow := !inGrace && (l == nil || (l.head == nil && l.mayHold(req.Shared, req.Limit)))
	if !holdNow {
		if req.NoWait {
			return State{}, RefusedBusy, dst, nil
		}
		if t.cfg.MaxWaitersPerLock > 0 && l != nil && l.waiters >= t.cfg.MaxWaitersPerLock {
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
		shared:   req.Shared,
		lease:    req.Lease,
		lastSeen: now,
		since:    now,
		deadline: now.Add(req.Lease),
	}
	if req.Shared {
		if l.shared == 0 {
			l.limit = req.Limit
		}
		l.shared++
	}
	t.sessions[id] = s
	t.expiry.push(s)
	if holdNow {
		t.grant(now, s)
		return State{Held: true, Token: s.token}, NotRefused, dst, nil
	}
	l.enqueue(s)
	return State{Position: l.waiters}, NotRefused, dst, nil
}

// HolderOf returns the first holder of lock name and how many sessions wait
// behind it; ok is false when nobody holds it.
func (t *Table) HolderOf(name string) (id SessionID, waiters int, ok bool) {
	l := t.locks[name]
	if l == nil || l.first == nil {
		return 0, 0, false
	}
	return l.first.id, l.waiters, true
}

// Occupancy tells how lock name is held now: by how many holders, whether
// by an exclusive claim (then the only one), and how many wait.
func (t *Table) Occupancy(name string) (holders int, exclusive bool, waiters int) {
	l := t.locks[name]
	if l == nil {
		return 0, false, 0
	}
	return l.holders, l.exclusivelyHeld(), l.waiters
}

// Limit is the limit in force for the shared claims of lock name; false
// while the name has no shared session (holding or waiting), when the
// next shared claim sets it.
func (t *Table) Limit(name string) (int, bool) {
	l := t.locks[name]
	if l == nil || l.shared == 0 {
		return 0, false
	}
	return l.limit, true
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
// to dst. The queue moves at once for what it frees: the slot of a holder,
// or the head of the queue, whose leaving may let those behind it in. It
// reports false if the session was not in the table.
func (t *Table) Release(now time.Time, id SessionID, dst []Exit) ([]Exit, bool) {
	s := t.sessions[id]
	if s == nil {
		return dst, false
	}
	t.begin()
	return t.remove(now, s, CauseReleased, dst), true
}

// Expire removes every session whose lease has run out at now: silent for
// at least its lease. Exits are appended to dst. If the grace period ends
// at or before now, it then grants the heads of every queue, in the order
// of the locks' names, as one Exit per lock with Cause CauseGraceEnded;
// waiters whose lease ran out during the grace period have left before.
func (t *Table) Expire(now time.Time, dst []Exit) []Exit {
	t.begin()
	return t.expire(now, dst)
}

func (t *Table) expire(now time.Time, dst []Exit) []Exit {
	for len(t.expiry) > 0 && !t.expiry[0].deadline.After(now) {
		dst = t.remove(now, t.expiry[0], CauseExpired, dst)
	}
	if !t.graceUntil.IsZero() && !now.Before(t.graceUntil) {
		dst = t.endGrace(now, dst)
	}
	return dst
}

// endGrace ends the grace period and grants the heads of every queue.
func (t *Table) endGrace(now time.Time, dst []Exit) []Exit {
	t.graceUntil = time.Time{}
	names := make([]string, 0, len(t.locks))
	for name, l := range t.locks {
		if l.first == nil && l.head != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names) // a fixed order, for tests and logs
	for _, name := range names {
		l := t.locks[name]
		exit := Exit{Cause: CauseGraceEnded, Lock: name}
		// Expire has just removed every overdue session: none is left to
		// expire on the way.
		overdue := t.moveQueue(now, l, &exit, nil)
		if exit.Moving = l.moving; len(exit.Promoted) > 0 || exit.Moving {
			dst = append(dst, exit)
		}
		dst = append(dst, overdue...)
	}
	return dst
}

// Moving reports whether a queue was left moving (see Config.GrantStep):
// Promote has work.
func (t *Table) Moving() bool {
	for len(t.moving) > 0 && !t.moving[0].moving {
		t.moving[0].listed = false
		t.moving[0] = nil
		t.moving = t.moving[1:]
	}
	return len(t.moving) > 0
}

// Promote moves on the queues that earlier calls left moving, oldest
// first, making at most Config.GrantStep grants, as those calls would have
// gone on to make them: one exit with Cause CauseQueueMoved per queue it
// moved (the last one's Moving is set if it is left moving still), and
// the overdue heads expired on the way after it, appended to dst.
func (t *Table) Promote(now time.Time, dst []Exit) []Exit {
	t.begin()
	for t.Moving() && t.budget > 0 {
		l := t.moving[0] // stays first while it is left moving still
		exit := Exit{Cause: CauseQueueMoved, Lock: l.name}
		overdue := t.moveQueue(now, l, &exit, nil)
		exit.Moving = l.moving
		dst = append(dst, exit)
		dst = append(dst, overdue...)
		t.dropIfEmpty(l)
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

// NewestToken is the token of lock name's newest holder; false when nobody
// holds it. Tokens rise with every grant, so the holders of name at this
// instant are those whose token is at most this one (see
// ForceReleaseThrough).
func (t *Table) NewestToken(name string) (uint64, bool) {
	l := t.locks[name]
	if l == nil || l.last == nil {
		return 0, false
	}
	return l.last.token, true
}

// ForceReleaseThrough takes lock name from at most max of its holders
// whose token is at most through, in grant order, and moves the queue for
// each slot it frees: called again and again with the token NewestToken
// gave, it ends exactly the holders of that instant, a step at a time,
// and none granted since. more reports whether such holders are left. It
// returns ErrNotHeld when there is none.
func (t *Table) ForceReleaseThrough(now time.Time, name string, through uint64, max int, dst []Exit) (_ []Exit, more bool, _ error) {
	l := t.locks[name]
	if l == nil || l.first == nil || l.first.token > through {
		return dst, false, ErrNotHeld
	}
	t.begin()
	for n := 0; n < max && l.first != nil && l.first.token <= through; n++ {
		dst = t.remove(now, l.first, CauseForceReleased, dst)
	}
	// remove may have dropped l: look again.
	l = t.locks[name]
	return dst, l != nil && l.first != nil && l.first.token <= through, nil
}

// ForceReleaseSession takes the lock from holder id alone, and moves the
// queue for the slot it frees. It returns ErrUnknownSession for a session
// not in the table and ErrWaiter for a waiter (use Kick).
func (t *Table) ForceReleaseSession(now time.Time, id SessionID, dst []Exit) ([]Exit, error) {
	s := t.sessions[id]
	if s == nil {
		return dst, ErrUnknownSession
	}
	if !s.held() {
		return dst, ErrWaiter
	}
	t.begin()
	return t.remove(now, s, CauseForceReleased, dst), nil
}

// Kick removes waiter id from its queue; a waiter at the head leaving may
// let those behind it in. It returns ErrUnknownSession for a session not in
// the table and ErrHolder for a holder (use ForceReleaseSession).
func (t *Table) Kick(now time.Time, id SessionID, dst []Exit) ([]Exit, error) {
	s := t.sessions[id]
	if s == nil {
		return dst, ErrUnknownSession
	}
	if s.held() {
		return dst, ErrHolder
	}
	t.begin()
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
// nobody holds or waits. Its holders are left to HolderPage; Holder is the
// first, and Limit is given.
func (t *Table) LockPage(now time.Time, name string, after SessionID, skip, max int) (li LockInfo, more, ok bool) {
	l := t.locks[name]
	if l == nil {
		return LockInfo{}, false, false
	}
	li = LockInfo{Name: l.name, Waiters: make([]Info, 0, min(max, l.waiters))}
	if l.first != nil {
		h := t.info(now, l.first)
		li.Holder = &h
	}
	if l.shared > 0 {
		li.Limit = l.limit
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

// HolderPage describes at most max holders of lock name at now, in grant
// order, and reports whether more follow, as LockPage does for waiters:
// the page starts after holder after when that session still holds name,
// otherwise after skip holders from the first.
func (t *Table) HolderPage(now time.Time, name string, after SessionID, skip, max int) (holders []Info, more bool) {
	l := t.locks[name]
	if l == nil {
		return nil, false
	}
	h := l.first
	if s := t.sessions[after]; after != 0 && s != nil && s.lock == l && s.held() {
		h = s.next
	} else {
		for i := 0; h != nil && i < skip; i++ {
			h = h.next
		}
	}
	holders = make([]Info, 0, min(max, l.holders))
	for ; h != nil && len(holders) < max; h = h.next {
		holders = append(holders, t.info(now, h))
	}
	return holders, h != nil
}

func (t *Table) lockInfo(now time.Time, l *lock) LockInfo {
	li := LockInfo{Name: l.name, Holders: make([]Info, 0, l.holders), Waiters: make([]Info, 0, l.waiters)}
	for h := l.first; h != nil; h = h.next {
		li.Holders = append(li.Holders, t.info(now, h))
	}
	if len(li.Holders) > 0 {
		li.Holder = &li.Holders[0]
	}
	if l.shared > 0 {
		li.Limit = l.limit
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
		Shared:   s.shared,
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

// grant makes s, which is in no list, a holder of its lock with a new token.
func (t *Table) grant(now time.Time, s *session) {
	tok := t.cfg.NextToken()
	if tok == 0 {
		panic("locktable: NextToken returned 0")
	}
	s.token = tok
	s.since = now
	s.lock.addHolder(s)
}

// remove takes s out of the table. The queue then moves for what s freed
// (see moveQueue): a holder's slot, or the head of the queue; the grants
// go into s's exit, and the overdue waiters expired on the way follow it.
func (t *Table) remove(now time.Time, s *session, cause Cause, dst []Exit) []Exit {
	l := s.lock
	exit := Exit{Session: t.info(now, s), Cause: cause, Lock: l.name}
	t.expiry.remove(s)
	delete(t.sessions, s.id)
	frees := s.held() || s == l.head
	if s.held() {
		l.removeHolder(s)
	} else {
		l.unlink(s)
	}
	if s.shared {
		l.shared--
	}
	var overdue []Exit
	if frees {
		overdue = t.moveQueue(now, l, &exit, overdue)
	}
	exit.Moving = l.moving
	dst = append(dst, exit)
	dst = append(dst, overdue...)
	t.dropIfEmpty(l)
	return dst
}

// moveQueue grants the heads of l's queue, one after the other, while the
// head may hold, and puts the grants, in queue order, in exit.Promoted. A
// head that may hold but has been silent for its lease expires instead (its
// exit is appended to overdue), so a dead waiter never gets the lock; one
// that may not hold stops the queue, and overdue waiters behind it are left
// to Expire (walking the whole queue would make every handover O(queue)).
// When the call's budget runs out first, l is left moving (see
// Config.GrantStep). During the grace period nothing is granted.
func (t *Table) moveQueue(now time.Time, l *lock, exit *Exit, overdue []Exit) []Exit {
	if !t.graceUntil.IsZero() {
		return overdue
	}
	start := len(t.grants)
	for w := l.head; w != nil && l.mayHold(w.shared, l.limit); w = l.head {
		if t.budget == 0 {
			l.moving = true
			if !l.listed {
				l.listed = true
				t.moving = append(t.moving, l)
			}
			break
		}
		t.budget--
		if !w.deadline.After(now) {
			overdue = append(overdue, Exit{Session: t.info(now, w), Cause: CauseExpired, Lock: l.name})
			t.expiry.remove(w)
			delete(t.sessions, w.id)
			l.unlink(w)
			if w.shared {
				l.shared--
			}
			continue
		}
		waited := now.Sub(w.since)
		l.unlink(w)
		t.grant(now, w)
		t.grants = append(t.grants, Grant{ID: w.id, Name: l.name, Token: w.token, Shared: w.shared, Waited: waited})
	}
	if n := len(t.grants); n > start {
		exit.Promoted = t.grants[start:n:n]
	}
	if l.moving && (l.head == nil || !l.mayHold(l.head.shared, l.limit)) {
		l.moving = false // moved as far as it may: its entry in t.moving is skipped
	}
	return overdue
}

func (t *Table) dropIfEmpty(l *lock) {
	if l.first == nil && l.head == nil {
		delete(t.locks, l.name)
		l.moving = false
	}
}

// sessionList is one of a lock's two lists of sessions, linked through
// the sessions' prev/next, by its two ends: the holders (first, last) or
// the queue (head, tail). A session is in one list at a time.
type sessionList struct{ first, last **session }

// push appends s, which is in no list, at the end of the list.
func (q sessionList) push(s *session) {
	s.prev, s.next = *q.last, nil
	if *q.last != nil {
		(*q.last).next = s
	} else {
		*q.first = s
	}
	*q.last = s
}

// remove takes s out of the list.
func (q sessionList) remove(s *session) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		*q.first = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		*q.last = s.prev
	}
	s.prev, s.next = nil, nil
}

func (l *lock) holderList() sessionList { return sessionList{&l.first, &l.last} }
func (l *lock) queue() sessionList      { return sessionList{&l.head, &l.tail} }

// addHolder appends s to l's holders.
func (l *lock) addHolder(s *session) {
	l.holderList().push(s)
	l.holders++
}

// removeHolder takes s out of l's holders.
func (l *lock) removeHolder(s *session) {
	l.holderList().remove(s)
	l.holders--
}

func (l *lock) enqueue(s *session) {
	l.queue().push(s)
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
	l.queue().remove(s)
	l.waiters--
}
