package locktable_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

// The randomized test. It runs random schedules against a reference model
// kept here, as simple as it can be, and compares after every step. The
// events: acquire (exclusive, or shared with a limit of 1 to 5), heartbeat
// (seen), silence (advance), close (release), reset (a release and the
// client's reconnect as a new session), expire, force-release of a name
// (every holder) and of one holder, kick, and restart: the table is
// dropped, as a server that stops cleanly or crashes drops it, and a new
// one starts with the token counter moved on (as tokenstore.Open moves the
// epoch) and, after a crash, a grace period as long as the longest lease
// noted (the bound that tokenstore keeps); then the clients reconnect in a
// random order. A quarter of the schedules make exclusive claims only:
// version 1's mutex, which must behave as it always has. In three
// schedules of four the table has tickets and the clients' claims go on
// (version 3: model_v3_test.go); in the others it is the table of
// versions 1 and 2.
//
// Besides agreeing with the model, the table is held to the promises of
// the protocol on every step, checked on what the table itself says (its
// exits and its snapshot), before any comparison with the model, so that
// a broken promise is named as such:
//
//   - never more shared holders than the name's limit;
//   - never an exclusive holder beside anyone;
//   - grants in queue order: nobody overtakes (every holder arrived before
//     every waiter; the grants of one call come in arrival order);
//   - tokens strictly rising per name, for every grant, so two holders
//     never share one;
//   - no waiter left behind a head that could hold;
//   - after a crash, no grant of a name while a holder of the crashed run
//     could still believe it holds it (its last heartbeat plus its lease).

var (
	seedFlag      = flag.Uint64("seed", 0, "run only the randomized schedule with this seed, logging every step")
	schedulesFlag = flag.Int("schedules", 2000, "number of randomized schedules")
)

type mSession struct {
	id       locktable.SessionID
	name     string
	owner    string
	shared   bool
	limit    int // shared only
	lease    time.Duration
	lastSeen time.Time
	arrived  time.Time // ACQUIRE
	granted  time.Time
	token    uint64 // 0 while waiting
	// Version 3: its ticket (0 if it never queued, or no tickets), the
	// resume attempt it is on, and: v3, its client may carry the claim on;
	// breaker, its client broke the rules to bring it back; pending,
	// carried (entered without a grant), resumed, frozen, revoked, as the
	// table's.
	ticket                                     uint64
	attempt                                    uint32
	v3, breaker                                bool
	pending, carried, resumed, frozen, revoked bool
}

func (s *mSession) overdue(now time.Time) bool { return !s.lastSeen.Add(s.lease).After(now) }
func (s *mSession) deadline() time.Time        { return s.lastSeen.Add(s.lease) }

type model struct {
	maxSessions, maxWaiters int
	sessions                map[locktable.SessionID]*mSession
	holders                 map[string][]locktable.SessionID // grant order
	queue                   map[string][]locktable.SessionID // arrival order
	limit                   map[string]int                   // while the name has shared sessions

	graceUntil time.Time     // the table's grace period; zero when none or over
	maxLease   time.Duration // the longest lease noted since the last clean start
	// believedUntil is, per name, when the last holder of a crashed run
	// stops believing it holds the lock at the latest: its last heartbeat
	// plus its lease. No grant of the name may come before.
	believedUntil map[string]time.Time
	// storeGraceEnds is when the token store of this run lets a clean
	// stop count as clean: the run's start plus the bound it kept from a
	// crash (tokenstore.Store.MarkClean).
	storeGraceEnds time.Time
	// Version 3: the names' FreezeThrough marks, the table's
	// Config.ResumeBelow, and claims of version 3 that ended, which a
	// client that breaks the rules may bring back.
	frozenThrough map[string]uint64
	resumeBelow   uint64
	ended         []locktable.Claim
	// tombs are the claims carried in that ended in this grace, with the
	// refusal each gets if it comes back (emptied when the grace ends).
	tombs map[tomb]locktable.Refusal
}

type tomb struct {
	id     uint64
	waiter bool
}

// want is what the model expects of one table call: who leaves and why,
// and who is granted, per name in queue order. promotedBy, if set, is the
// session whose exit must carry every grant (a call that removes one
// session); otherwise the grants may be spread over the exits of the call
// (an expiry removes sessions in deadline order, and which exit frees the
// slot is the heap's business; the outcome is the same).
type want struct {
	exits      map[locktable.SessionID]locktable.Cause
	grants     map[string][]locktable.SessionID
	promotedBy locktable.SessionID
}

func newWant() *want {
	return &want{exits: map[locktable.SessionID]locktable.Cause{}, grants: map[string][]locktable.SessionID{}}
}

type schedule struct {
	t       *testing.T
	seed    uint64
	verbose bool
	rng     *rand.Rand
	tb      *locktable.Table
	m       *model
	now     time.Time
	nextID  locktable.SessionID
	step    int
	history []entry
	// Tokens and tickets are epoch<<40 | sequence; a restart starts an
	// epoch, as tokenstore.Open and a cluster's term do.
	epoch, tokSeq, tktSeq uint64
	exclusive             bool // this schedule makes exclusive claims only
	v3                    bool // this schedule's table has tickets, and claims go on
	limits                map[string]int
	// lastToken is the last token granted per name, and globalToken the
	// last of all, as the table's grants said (not the model).
	lastToken   map[string]uint64
	globalToken uint64
	stats       scheduleStats
	// Version 3: the clients away, the tokens of the claims brought back
	// against the rules, the last grant of each name in this term.
	away          []*away
	breakers      map[uint64]bool
	lastTermGrant map[string]uint64
	v3stats       v3Stats
}

// logf notes a step for the history shown on failure; the line is only
// formatted then, as formatting every step would dominate the test's time.
func (s *schedule) logf(format string, args ...any) {
	e := entry{step: s.step, at: s.now.Sub(t0), format: format, args: args}
	s.history = append(s.history, e)
	if s.verbose {
		s.t.Log(e)
	}
}

type entry struct {
	step   int
	at     time.Duration
	format string
	args   []any
}

func (e entry) String() string {
	return fmt.Sprintf("step %d at +%v: ", e.step, e.at) + fmt.Sprintf(e.format, e.args...)
}

func (s *schedule) fatalf(format string, args ...any) {
	s.t.Helper() // the line reported is the check's
	s.t.Fatalf("seed %d, step %d: %s\nreplay: go test ./locktable -run 'TestRandomSchedules$' -seed=%d -v\nhistory:\n  %s",
		s.seed, s.step, fmt.Sprintf(format, args...), s.seed, s.historyText())
}

func (s *schedule) historyText() string {
	lines := make([]string, len(s.history))
	for i, e := range s.history {
		lines[i] = e.String()
	}
	return strings.Join(lines, "\n  ")
}

func TestRandomSchedules(t *testing.T) {
	if *seedFlag != 0 {
		runSchedule(t, *seedFlag, true)
		return
	}
	n := *schedulesFlag
	if testing.Short() {
		n /= 10
	}
	base := rand.Uint64()
	t.Logf("seeds %d .. %d", base, base+uint64(n)-1)
	var total scheduleStats
	var v3 v3Stats
	for i := 0; i < n; i++ {
		st, st3 := runSchedule(t, base+uint64(i), false)
		v3.add(st3)
		total.steps += st.steps
		total.restarts += st.restarts
		total.graceRestarts += st.graceRestarts
		total.graceGrants += st.graceGrants
		total.sharedGrants += st.sharedGrants
		total.multiGrants += st.multiGrants
		total.mismatches += st.mismatches
		total.fullSemaphores += st.fullSemaphores
	}
	t.Logf("%d schedules: %d steps, %d restarts (%d with a grace period), %d grants at the end of a grace period, "+
		"%d shared grants, %d calls granting several at once, %d limit mismatches, %d steps with a semaphore full",
		n, total.steps, total.restarts, total.graceRestarts, total.graceGrants,
		total.sharedGrants, total.multiGrants, total.mismatches, total.fullSemaphores)
	if n >= 100 && (total.multiGrants == 0 || total.mismatches == 0 || total.fullSemaphores == 0 || total.graceGrants == 0) {
		t.Errorf("the schedules never reached a case they exist for: %+v", total)
	}
	t.Logf("version 3: %+v", v3)
	if n >= 100 && (v3.moves == 0 || v3.lateAttempts == 0 || v3.lostPushes == 0 || v3.admittedHolders == 0 || v3.admittedWaiters == 0 ||
		v3.listed == 0 || v3.pendingBack == 0 || v3.revoked == 0 || v3.frozen == 0 || v3.superseded == 0 || v3.overruled == 0 ||
		v3.overloaded == 0 || v3.breakers == 0) {
		t.Errorf("the schedules never reached a case of version 3 they exist for: %+v", v3)
	}
}

// scheduleStats counts what a schedule exercised.
type scheduleStats struct {
	steps, restarts, graceRestarts, graceGrants int
	sharedGrants, multiGrants, mismatches       int
	fullSemaphores                              int
}

var names = []string{"a", "b", "c"}

func runSchedule(t *testing.T, seed uint64, verbose bool) (scheduleStats, v3Stats) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m := &model{
		sessions:      map[locktable.SessionID]*mSession{},
		holders:       map[string][]locktable.SessionID{},
		queue:         map[string][]locktable.SessionID{},
		limit:         map[string]int{},
		believedUntil: map[string]time.Time{},
		frozenThrough: map[string]uint64{},
		tombs:         map[tomb]locktable.Refusal{},
	}
	if rng.IntN(3) == 0 {
		m.maxSessions = 3 + rng.IntN(6)
	}
	if rng.IntN(3) == 0 {
		m.maxWaiters = 1 + rng.IntN(3)
	}
	s := &schedule{t: t, seed: seed, verbose: verbose, rng: rng, m: m, now: t0, nextID: 1, epoch: 1,
		exclusive: rng.IntN(4) == 0, limits: map[string]int{}, lastToken: map[string]uint64{},
		breakers: map[uint64]bool{}, lastTermGrant: map[string]uint64{}}
	for _, name := range names {
		s.limits[name] = 1 + rng.IntN(5)
	}
	s.v3 = rng.IntN(4) != 0
	s.tb = s.newTable(time.Time{})
	s.logf("config: max sessions %d, max waiters %d, exclusive only %v, limits %v, version 3 %v", m.maxSessions, m.maxWaiters, s.exclusive, s.limits, s.v3)
	steps := 100 + rng.IntN(200)
	events := 100
	if s.v3 {
		events = 130
	}
	for s.step = 1; s.step <= steps; s.step++ {
		r := rng.IntN(events)
		if s.v3 && !m.graceUntil.IsZero() && rng.IntN(3) == 0 {
			// In a grace after a crash, claims come back: those of the
			// clients away, and stale ones (the conflicts).
			r = 108 + rng.IntN(14)
		}
		switch {
		case r < 28:
			s.acquire()
		case r < 50:
			s.seen()
		case r < 67:
			s.advance()
		case r < 74:
			s.release()
		case r < 78:
			s.reset()
		case r < 85:
			s.expire()
		case r < 88:
			s.forceRelease()
		case r < 92:
			s.forceReleaseSession()
		case r < 97:
			s.kick()
		case r < 100:
			s.restart()
		case r < 108:
			s.move()
		case r < 117:
			s.comeBack()
		case r < 122:
			s.stale()
		case r < 126:
			s.freeze()
		default:
			s.endFrozen()
		}
		s.check()
	}
	s.stats.steps = steps
	return s.stats, s.v3stats
}

// newTable starts a table whose tokens continue from the last one, as a
// restarted server's do from its token store, with grace until noGrant.
func (s *schedule) newTable(noGrant time.Time) *locktable.Table {
	cfg := locktable.Config{
		MaxSessions:       s.m.maxSessions,
		MaxWaitersPerLock: s.m.maxWaiters,
		NextToken:         func() uint64 { s.tokSeq++; return s.epoch<<40 | s.tokSeq },
		NoGrantBefore:     noGrant,
	}
	if s.v3 {
		cfg.NextTicket = func() uint64 { s.tktSeq++; return s.epoch<<40 | s.tktSeq }
		cfg.ResumeBelow = s.m.resumeBelow
	}
	return locktable.New(cfg)
}

// pick returns a session id: mostly one in the table, sometimes one that
// left or never was.
func (s *schedule) pick() locktable.SessionID {
	return s.pickWhere(func(*mSession) bool { return true })
}

// pickConnected is as pick, but never a pending claim: it has no
// connection to close or reset.
func (s *schedule) pickConnected() locktable.SessionID {
	return s.pickWhere(func(sess *mSession) bool { return !sess.pending })
}

func (s *schedule) pickWhere(ok func(*mSession) bool) locktable.SessionID {
	ids := make([]locktable.SessionID, 0, len(s.m.sessions))
	for id, sess := range s.m.sessions {
		if ok(sess) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || s.rng.IntN(10) == 0 {
		for {
			id := locktable.SessionID(1 + s.rng.IntN(int(s.nextID)))
			if sess := s.m.sessions[id]; sess == nil || ok(sess) {
				return id
			}
		}
	}
	slices.Sort(ids)
	return ids[s.rng.IntN(len(ids))]
}

func (s *schedule) advance() {
	var d time.Duration
	switch s.rng.IntN(4) {
	case 0:
		d = time.Duration(s.rng.IntN(3)) // 0, 1 or 2 ns: ties and edges
	case 1:
		d = time.Duration(s.rng.IntN(int(3 * time.Millisecond)))
	default:
		// Land exactly on, or 1ns short of, some session's deadline.
		if len(s.m.sessions) > 0 {
			sess := s.m.sessions[s.pick()]
			if sess != nil {
				due := sess.deadline().Add(-time.Duration(s.rng.IntN(2)))
				if due.After(s.now) {
					d = due.Sub(s.now)
				}
			}
		}
	}
	s.now = s.now.Add(d)
	s.logf("advance %v", d)
}

func (s *schedule) randomLease() time.Duration {
	switch s.rng.IntN(4) {
	case 0:
		return time.Duration(1 + s.rng.IntN(3)) // a few ns
	case 1:
		return time.Millisecond
	default:
		return time.Duration(1 + s.rng.IntN(int(5*time.Millisecond)))
	}
}

// The model's rules.

// exclusivelyHeld reports whether an exclusive claim holds name.
func (m *model) exclusivelyHeld(name string) bool {
	h := m.holders[name]
	return len(h) > 0 && !m.sessions[h[0]].shared
}

// mayGrant reports whether waiter w may be granted name now: never while
// pending or frozen.
func (m *model) mayGrant(name string, w *mSession) bool {
	return !w.pending && !w.frozen && m.mayHold(name, w.shared, w.limit)
}

// mayHold reports whether a claim may hold name by its holders alone.
func (m *model) mayHold(name string, shared bool, limit int) bool {
	if !shared {
		return len(m.holders[name]) == 0
	}
	return !m.exclusivelyHeld(name) && len(m.holders[name]) < limit
}

// sharedSessions counts the shared sessions of name, holding or waiting.
func (m *model) sharedSessions(name string) int {
	n := 0
	for _, sess := range m.sessions {
		if sess.name == name && sess.shared {
			n++
		}
	}
	return n
}

// remove takes sess out; with move, the queue then moves if sess was a
// holder or the head of the queue.
func (m *model) remove(now time.Time, sess *mSession, cause locktable.Cause, move bool, w *want) {
	name := sess.name
	frees := sess.token != 0 || (len(m.queue[name]) > 0 && m.queue[name][0] == sess.id)
	m.drop(sess, cause)
	w.exits[sess.id] = cause
	if move && frees {
		m.moveQueue(now, name, w)
	}
	if len(m.holders[name]) == 0 && len(m.queue[name]) == 0 {
		delete(m.frozenThrough, name) // the table drops the lock, and its mark
	}
}

// drop forgets sess, which leaves with cause. A claim of version 3 that
// ends may yet be brought back, against the rules: it is noted; and one
// carried in that ends in the grace is refused if it comes back in it.
func (m *model) drop(sess *mSession, cause locktable.Cause) {
	if sess.carried && !m.graceUntil.IsZero() {
		refusal := locktable.RefusedResume
		if cause == locktable.CauseSuperseded {
			refusal = locktable.RefusedSuperseded
		}
		if sess.token != 0 {
			m.tombs[tomb{sess.token, false}] = refusal
		}
		if sess.ticket != 0 {
			m.tombs[tomb{sess.ticket, true}] = refusal
		}
	}
	del := func(id locktable.SessionID) bool { return id == sess.id }
	m.holders[sess.name] = slices.DeleteFunc(m.holders[sess.name], del)
	m.queue[sess.name] = slices.DeleteFunc(m.queue[sess.name], del)
	delete(m.sessions, sess.id)
	if m.sharedSessions(sess.name) == 0 {
		delete(m.limit, sess.name)
	}
	if sess.v3 && sess.token != ^uint64(0) {
		if m.ended = append(m.ended, claimOf(sess)); len(m.ended) > 32 {
			m.ended = m.ended[1:]
		}
	}
}

// moveQueue grants the heads of name's queue while they may hold; an
// overdue head that may hold expires instead. Nothing moves during grace.
func (m *model) moveQueue(now time.Time, name string, w *want) {
	if !m.graceUntil.IsZero() {
		return
	}
	for len(m.queue[name]) > 0 {
		head := m.sessions[m.queue[name][0]]
		if !m.mayGrant(name, head) {
			return
		}
		if head.overdue(now) {
			m.drop(head, locktable.CauseExpired)
			w.exits[head.id] = locktable.CauseExpired
			continue
		}
		m.queue[name] = m.queue[name][1:]
		m.holders[name] = append(m.holders[name], head.id)
		head.granted = now
		head.token = ^uint64(0) // filled in from the table's grant
		w.grants[name] = append(w.grants[name], head.id)
	}
}

// expireAll is the model's expiry: every session silent for its lease
// leaves, in deadline order, each moving the queue.
func (m *model) expireAll(now time.Time, w *want) {
	for {
		var next *mSession
		for _, sess := range m.sessions {
			if sess.overdue(now) && (next == nil || sess.deadline().Before(next.deadline()) ||
				(sess.deadline().Equal(next.deadline()) && sess.id < next.id)) {
				next = sess
			}
		}
		if next == nil {
			return
		}
		m.remove(now, next, locktable.CauseExpired, true, w)
	}
}

// endGraceIfDue ends the grace period at now, if it is due, granting the
// heads of every queue; it returns the grants per name, in name order.
func (m *model) endGraceIfDue(now time.Time) []graceGrant {
	if m.graceUntil.IsZero() || now.Before(m.graceUntil) {
		return nil
	}
	m.graceUntil = time.Time{}
	clear(m.tombs)
	var out []graceGrant
	for _, name := range m.names() {
		w := newWant()
		m.moveQueue(now, name, w)
		if len(w.exits) != 0 {
			panic("an overdue waiter left at the end of the grace period") // expireAll ran first
		}
		if len(w.grants[name]) > 0 {
			out = append(out, graceGrant{name: name, ids: w.grants[name]})
		}
	}
	return out
}

type graceGrant struct {
	name string
	ids  []locktable.SessionID
}

// names are the names with a holder or waiters, sorted.
func (m *model) names() []string {
	var out []string
	for _, name := range names {
		if len(m.holders[name]) > 0 || len(m.queue[name]) > 0 {
			out = append(out, name)
		}
	}
	return out
}

// The promises, checked on what the table says.

// checkGrantPromises checks the grants of one call's exits: per name, in
// arrival order (nobody overtakes) and with tokens strictly rising past
// every earlier grant of the name; and none during a crash's aftermath.
func (s *schedule) checkGrantPromises(exits []locktable.Exit) {
	for _, e := range exits {
		for _, g := range e.Promoted {
			if sess := s.m.sessions[g.ID]; sess != nil && sess.pending {
				s.fatalf("promise broken: pending claim %d (its client away) granted %q", g.ID, g.Name)
			}
			s.checkGrant(g.ID, g.Name, g.Token)
		}
	}
	if s.m.graceUntil.IsZero() {
		return
	}
	for _, e := range exits {
		if len(e.Promoted) > 0 && e.Cause != locktable.CauseGraceEnded && s.now.Before(s.m.graceUntil) {
			s.fatalf("exit %s granted during the grace period", exitIDs(exits))
		}
	}
}

// checkGrant checks one grant against the promises, and records its token.
func (s *schedule) checkGrant(id locktable.SessionID, name string, token uint64) {
	if until := s.m.believedUntil[name]; s.now.Before(until) {
		s.fatalf("grant to %d of %q at +%v: a holder of the crashed run may believe it holds the lock until +%v",
			id, name, s.now.Sub(t0), until.Sub(t0))
	}
	if token <= s.lastToken[name] || token <= s.globalToken {
		s.fatalf("promise broken: grant to %d of %q: got token %d, want more than %d (the name's last) and %d (the last of all)",
			id, name, token, s.lastToken[name], s.globalToken)
	}
	s.lastToken[name] = token
	s.globalToken = token
	s.lastTermGrant[name] = token
}

// checkTablePromises checks the table's state: the holders within the
// rules, nobody overtaken, and no waiter behind a head that could hold.
func (s *schedule) checkTablePromises() {
	inGrace := !s.m.graceUntil.IsZero()
	snap := s.tb.Snapshot(s.now)
	for _, li := range snap {
		shared := 0
		for _, h := range li.Holders {
			if h.Shared {
				shared++
			}
		}
		if shared > 0 && shared > li.Limit {
			s.fatalf("promise broken: lock %q has %d shared holders, over its limit %d: %+v", li.Name, shared, li.Limit, li.Holders)
		}
		if shared != len(li.Holders) && len(li.Holders) > 1 {
			s.fatalf("promise broken: lock %q has an exclusive holder beside others: %+v", li.Name, li.Holders)
		}
		if s.v3 {
			s.checkTicketOrder(li)
		}
		// Ids are given in arrival order: every holder arrived before
		// every waiter, and the queue keeps arrival order.
		for i, w := range li.Waiters {
			if s.v3 {
				break // claims that go on take new ids: tickets say the order
			}
			if i > 0 && w.ID < li.Waiters[i-1].ID {
				s.fatalf("promise broken: lock %q: waiter %d queued behind %d, who came later", li.Name, w.ID, li.Waiters[i-1].ID)
			}
			for _, h := range li.Holders {
				if h.ID > w.ID {
					s.fatalf("promise broken: lock %q: holder %d overtook waiter %d", li.Name, h.ID, w.ID)
				}
			}
		}
		if len(li.Waiters) == 0 || inGrace {
			continue
		}
		head := li.Waiters[0]
		exclusive := len(li.Holders) > 0 && !li.Holders[0].Shared
		if head.Pending || head.Frozen {
			continue // may not hold: its client is away, or it is being ended
		}
		if !head.Shared && len(li.Holders) == 0 || head.Shared && !exclusive && len(li.Holders) < li.Limit {
			s.fatalf("promise broken: lock %q: waiter %d (shared %v) at the head could hold (holders %d, limit %d) but waits",
				li.Name, head.ID, head.Shared, len(li.Holders), li.Limit)
		}
	}
	if s.v3 {
		s.checkBeliefs(snap)
	}
}

// checkTicketOrder checks that no pending claim holds a token of this term
// (none is granted), the queue of li in ticket order, and no holder
// granted in this term (its ticket is of this epoch) ahead of a waiter
// with an older ticket: a claim that came back to a place in front came
// in the grace, before any grant.
func (s *schedule) checkTicketOrder(li locktable.LockInfo) {
	for _, h := range li.Holders {
		if h.Pending && h.Token >= s.epoch<<40 {
			s.fatalf("promise broken: lock %q: pending claim %d holds token %x of this term: it was granted", li.Name, h.ID, h.Token)
		}
	}
	for i, w := range li.Waiters {
		if w.Ticket == 0 || i > 0 && w.Ticket <= li.Waiters[i-1].Ticket {
			s.fatalf("promise broken: lock %q: waiter %d with ticket %x queued behind %d with ticket %x", li.Name, w.ID, w.Ticket, li.Waiters[max(i-1, 0)].ID, li.Waiters[max(i-1, 0)].Ticket)
		}
	}
	for _, h := range li.Holders {
		if len(li.Waiters) > 0 && h.Ticket >= s.epoch<<40 && h.Ticket > li.Waiters[0].Ticket {
			s.fatalf("promise broken: lock %q: holder %d with ticket %x overtook waiter %d with ticket %x", li.Name, h.ID, h.Ticket, li.Waiters[0].ID, li.Waiters[0].Ticket)
		}
	}
}

// checkExits compares one call's exits with the model's expectations and
// records the tokens of the grants. graceGrants are the grants at the end
// of the grace period, one exit per name in name order, after every other
// exit.
func (s *schedule) checkExits(exits []locktable.Exit, w *want, graceGrants ...graceGrant) {
	cut := len(exits) - len(graceGrants)
	if cut < 0 {
		s.fatalf("got exits %s, want at least the %d grants at the end of the grace period %v", exitIDs(exits), len(graceGrants), graceGrants)
	}
	for i, gg := range graceGrants {
		e := exits[cut+i]
		if e.Cause != locktable.CauseGraceEnded || e.Session != (locktable.Info{}) || !slices.Equal(grantIDs(e.Promoted), gg.ids) {
			s.fatalf("exit %d of %s: got cause %v promoted %v, want the end of grace granting %v of %q", cut+i, exitIDs(exits), e.Cause, grantIDs(e.Promoted), gg.ids, gg.name)
		}
		s.stats.graceGrants += len(gg.ids)
		s.checkPromoted(e.Promoted)
	}
	exits = exits[:cut]
	got := map[string][]locktable.SessionID{}
	left := map[locktable.SessionID]bool{}
	if len(exits)-countCause(exits, locktable.CauseQueueMoved) != len(w.exits) {
		s.fatalf("got exits %s, want %d: %v", exitIDs(exits), len(w.exits), w.exits)
	}
	i := -1
	for _, e := range exits {
		if e.Cause == locktable.CauseQueueMoved { // a queue that a claim carried in let move
			if e.Session != (locktable.Info{}) {
				s.fatalf("got exits %s: a queue_moved exit with a session", exitIDs(exits))
			}
			for _, g := range e.Promoted {
				got[g.Name] = append(got[g.Name], g.ID)
			}
			s.checkPromoted(e.Promoted)
			continue
		}
		i++
		if left[e.Session.ID] {
			s.fatalf("got exits %s: session %d left twice", exitIDs(exits), e.Session.ID)
		}
		left[e.Session.ID] = true
		cause, ok := w.exits[e.Session.ID]
		if !ok {
			s.fatalf("got exits %s; session %d should not have left", exitIDs(exits), e.Session.ID)
		}
		if e.Cause != cause {
			s.fatalf("exit of %d: got cause %v, want %v", e.Session.ID, e.Cause, cause)
		}
		if e.Cause == locktable.CauseExpired && e.Session.Silent < e.Session.Lease {
			s.fatalf("exit of %d: expired after %v of silence, before its lease %v", e.Session.ID, e.Session.Silent, e.Session.Lease)
		}
		if w.promotedBy != 0 && len(e.Promoted) > 0 && (e.Session.ID != w.promotedBy || i != 0) {
			s.fatalf("exits %s: the grants of one session's end must come with its exit, the first", exitIDs(exits))
		}
		for _, g := range e.Promoted {
			got[g.Name] = append(got[g.Name], g.ID)
		}
		s.checkPromoted(e.Promoted)
	}
	for _, name := range names {
		if !slices.Equal(got[name], w.grants[name]) {
			s.fatalf("exits %s: grants of %q: got %v, want %v", exitIDs(exits), name, got[name], w.grants[name])
		}
	}
}

// checkPromoted compares grants with the model's sessions and takes their
// tokens.
func (s *schedule) checkPromoted(grants []locktable.Grant) {
	if len(grants) > 1 {
		s.stats.multiGrants++
	}
	for _, g := range grants {
		p := s.m.sessions[g.ID]
		if p == nil || p.token == 0 {
			s.fatalf("grant %+v: the model does not hold session %d", g, g.ID)
		}
		if g.Name != p.name || g.Shared != p.shared {
			s.fatalf("promotion of %d: got name %q shared %v, want %q %v", p.id, g.Name, g.Shared, p.name, p.shared)
		}
		if want := s.now.Sub(p.arrived); g.Waited != want {
			s.fatalf("promotion of %d: got Waited %v, want %v", p.id, g.Waited, want)
		}
		if p.shared {
			s.stats.sharedGrants++
		}
		p.token = g.Token
	}
}

func grantIDs(gs []locktable.Grant) []locktable.SessionID {
	var ids []locktable.SessionID
	for _, g := range gs {
		ids = append(ids, g.ID)
	}
	return ids
}

// The steps.

// randomRequest is a claim on a random name: in a mixed schedule shared
// half the time, with the name's limit, or now and then another one.
func (s *schedule) randomRequest(id locktable.SessionID) locktable.Request {
	r := locktable.Request{
		Name:   names[s.rng.IntN(len(names))],
		Owner:  fmt.Sprintf("o%d", id),
		Lease:  s.randomLease(),
		NoWait: s.rng.IntN(6) == 0,
	}
	if !s.exclusive && s.rng.IntN(2) == 0 {
		r.Shared = true
		r.Limit = s.limits[r.Name]
		if s.rng.IntN(8) == 0 {
			r.Limit = 1 + s.rng.IntN(5)
		}
	}
	return r
}

func (s *schedule) acquire() {
	id := s.nextID
	dup := len(s.m.sessions) > 0 && s.rng.IntN(20) == 0
	if dup {
		id = s.pick()
		if s.m.sessions[id] == nil {
			dup = false
			id = s.nextID
		}
	}
	r := s.randomRequest(id)
	if dup {
		s.logf("acquire %d (in use) %q", id, r.Name)
		_, _, exits, err := s.tb.Acquire(s.now, id, r, nil)
		if !errors.Is(err, locktable.ErrDuplicate) || len(exits) != 0 {
			s.fatalf("acquire of id %d in use: got %v, exits %s, want ErrDuplicate and none", id, err, exitIDs(exits))
		}
		return
	}
	s.acquireNew(r)
}

// acquireNew enters a new session with request r, as the server does: the
// lease is noted first (tokenstore.NoteLease), then the table decides.
func (s *schedule) acquireNew(r locktable.Request) {
	id := s.nextID
	s.nextID++
	s.logf("acquire %d %q lease %v nowait %v shared %v limit %d", id, r.Name, r.Lease, r.NoWait, r.Shared, r.Limit)
	s.m.maxLease = max(s.m.maxLease, r.Lease)
	st, ref, exits, err := s.tb.Acquire(s.now, id, r, nil)
	if err != nil {
		s.fatalf("acquire: got error %v, want none", err)
	}
	s.checkGrantPromises(exits)
	if st.Held {
		s.checkGrant(id, r.Name, st.Token)
	}
	s.checkTablePromises()

	w := newWant()
	s.m.expireAll(s.now, w)
	s.checkExits(exits, w, s.m.endGraceIfDue(s.now)...)

	m := s.m
	var wantRef locktable.Refusal
	inGrace := !m.graceUntil.IsZero()
	holdNow := !inGrace && len(m.queue[r.Name]) == 0 && m.mayHold(r.Name, r.Shared, r.Limit)
	limit, limited := m.limit[r.Name]
	switch {
	case r.Shared && limited && limit != r.Limit:
		wantRef = locktable.RefusedLimit
		s.stats.mismatches++
	case m.maxSessions > 0 && len(m.sessions) >= m.maxSessions:
		wantRef = locktable.RefusedSessions
	case inGrace && r.NoWait:
		wantRef = locktable.RefusedGrace
	case !holdNow && r.NoWait:
		wantRef = locktable.RefusedBusy
	case !holdNow && m.maxWaiters > 0 && len(m.queue[r.Name]) >= m.maxWaiters:
		wantRef = locktable.RefusedWaiters
	}
	if ref != wantRef {
		s.fatalf("acquire %d: got refusal %v, want %v", id, ref, wantRef)
	}
	if ref != locktable.NotRefused {
		if st != (locktable.State{}) {
			s.fatalf("refused acquire: got state %+v, want the zero state", st)
		}
		if got, ok := s.tb.Limit(r.Name); ok != limited || got != limit {
			s.fatalf("after a refusal: Limit(%q) = %d %v, want %d %v (a refused claim sets nothing)", r.Name, got, ok, limit, limited)
		}
		return
	}
	sess := &mSession{id: id, name: r.Name, owner: r.Owner, shared: r.Shared, lease: r.Lease, lastSeen: s.now, arrived: s.now,
		v3: s.v3 && s.rng.IntN(4) != 0}
	if r.Shared {
		sess.limit = r.Limit
		if !limited {
			m.limit[r.Name] = r.Limit
		}
	}
	m.sessions[id] = sess
	if holdNow {
		if !st.Held {
			s.fatalf("acquire %d of %q, which it may hold: got %+v, want held", id, r.Name, st)
		}
		m.holders[r.Name] = append(m.holders[r.Name], id)
		sess.granted = s.now
		sess.token = st.Token
		if r.Shared {
			s.stats.sharedGrants++
		}
		return
	}
	m.queue[r.Name] = append(m.queue[r.Name], id)
	if st.Held || st.Position != len(m.queue[r.Name]) {
		s.fatalf("acquire %d of %q, which it may not hold: got %+v, want waiting at %d", id, r.Name, st, len(m.queue[r.Name]))
	}
	if s.v3 {
		// Every waiter gets the next ticket of NextTicket.
		in, _ := s.tb.Session(s.now, id)
		if want := s.epoch<<40 | s.tktSeq; in.Ticket != want {
			s.fatalf("acquire %d queued with ticket %x, want the last of NextTicket %x", id, in.Ticket, want)
		}
		sess.ticket = in.Ticket
	}
}

func (s *schedule) seen() {
	id := s.pick()
	s.logf("seen %d", id)
	before, _ := s.tb.Session(s.now, id)
	st, ok := s.tb.Seen(s.now, id)
	if ok && (before.Frozen || before.Pending) {
		s.fatalf("promise broken: Seen confirmed session %d, frozen %v, pending %v", id, before.Frozen, before.Pending)
	}
	sess := s.m.sessions[id]
	if sess == nil || sess.overdue(s.now) || sess.pending {
		if ok || st != (locktable.State{}) {
			s.fatalf("seen %d: got %+v, %v, want the zero state, false (gone, overdue or pending)", id, st, ok)
		}
		return
	}
	if s.m.frozen(sess) {
		if ok || st != (locktable.State{Frozen: true}) {
			s.fatalf("seen of frozen %d: got %+v, %v, want frozen, false", id, st, ok)
		}
		return
	}
	if !ok {
		s.fatalf("seen %d: got false, want true", id)
	}
	sess.lastSeen = s.now
	s.checkState(sess, st)
}

func (s *schedule) checkState(sess *mSession, st locktable.State) {
	want := locktable.State{Held: true, Token: sess.token}
	if sess.token == 0 {
		want = locktable.State{Position: slices.Index(s.m.queue[sess.name], sess.id) + 1}
	}
	if st != want {
		s.fatalf("state of %d: got %+v, want %+v", sess.id, st, want)
	}
}

func (s *schedule) release() { s.releaseID(s.pickConnected(), "release") }

// reset is a connection reset followed by the client's reconnect: the
// session leaves as by a close, and the client enters again as a new
// session at the back of the queue.
func (s *schedule) reset() {
	id := s.pickConnected()
	sess := s.m.sessions[id]
	s.releaseID(id, "reset")
	if sess != nil {
		s.acquireNew(locktable.Request{Name: sess.name, Owner: sess.owner, Lease: sess.lease, Shared: sess.shared, Limit: sess.limit})
	}
}

func (s *schedule) releaseID(id locktable.SessionID, what string) {
	s.logf("%s %d", what, id)
	exits, ok := s.tb.Release(s.now, id, nil)
	s.checkGrantPromises(exits)
	s.checkTablePromises()
	sess := s.m.sessions[id]
	if sess == nil {
		if ok || len(exits) != 0 {
			s.fatalf("release of absent %d: got %v, %s, want false and no exits", id, ok, exitIDs(exits))
		}
		return
	}
	if !ok {
		s.fatalf("release %d: got false, want true", id)
	}
	w := newWant()
	w.promotedBy = id
	s.m.remove(s.now, sess, locktable.CauseReleased, true, w)
	s.checkExits(exits, w)
}

func (s *schedule) expire() {
	s.logf("expire")
	exits := s.tb.Expire(s.now, nil)
	s.checkGrantPromises(exits)
	s.checkTablePromises()
	w := newWant()
	s.m.expireAll(s.now, w)
	s.checkExits(exits, w, s.m.endGraceIfDue(s.now)...)
	for id := range s.m.sessions {
		in, ok := s.tb.Session(s.now, id)
		if !ok || in.Silent >= in.Lease {
			s.fatalf("after Expire: session %d: got %+v, %v, want it present and silent less than its lease", id, in, ok)
		}
	}
}

// forceRelease takes a name from every holder it has, in steps of a few
// holders: each ends, in token order, and the queue moves for each; a
// pending holder is revoked instead, and one revoked already is skipped.
// In a table of version 3 the holders are frozen first, as a server does
// when it accepts the release.
func (s *schedule) forceRelease() {
	name := names[s.rng.IntN(len(names))]
	step := 1 + s.rng.IntN(3)
	s.logf("force-release %q in steps of %d", name, step)
	var holders []locktable.SessionID // those it ends, or revokes
	for _, id := range s.m.holders[name] {
		if !s.m.sessions[id].revoked {
			holders = append(holders, id)
		}
	}
	through, ok := s.tb.NewestToken(name)
	if len(holders) == 0 {
		_, _, err := s.tb.ForceReleaseThrough(s.now, name, math.MaxUint64, step, nil)
		if ok != (len(s.m.holders[name]) > 0) || !errors.Is(err, locktable.ErrNotHeld) {
			s.fatalf("force-release of %q with no holder to end: got newest token %v, %v, want ErrNotHeld", name, ok, err)
		}
		return
	}
	if s.v3 {
		if err := s.tb.FreezeThrough(name, through); err != nil {
			s.fatalf("freeze through %x of %q: %v", through, name, err)
		}
		s.m.frozenThrough[name] = max(s.m.frozenThrough[name], through)
		s.checkTablePromises()
	}
	var exits []locktable.Exit
	for more := true; more; {
		var err error
		n := len(exits)
		exits, more, err = s.tb.ForceReleaseThrough(s.now, name, through, step, exits)
		if err != nil {
			s.fatalf("force-release %q: got %v, want no error", name, err)
		}
		if got := countCause(exits[n:], locktable.CauseForceReleased) + countCause(exits[n:], locktable.CauseRevoked); got == 0 || got > step {
			s.fatalf("force-release %q in steps of %d: a step ended %d holders", name, step, got)
		}
		for i := n; i < len(exits); i++ { // Promoted is valid until the next call
			exits[i].Promoted = slices.Clone(exits[i].Promoted)
		}
		s.checkGrantPromises(exits[n:])
		s.checkTablePromises()
	}
	w := newWant()
	for _, id := range holders {
		if sess := s.m.sessions[id]; sess.pending {
			sess.revoked = true
			w.exits[id] = locktable.CauseRevoked
			s.v3stats.revoked++
		} else {
			s.m.remove(s.now, sess, locktable.CauseForceReleased, true, w)
		}
	}
	// The holders' exits, in token order; the waiters expired on the way
	// follow the exit whose move expired them.
	var ended []locktable.SessionID
	for _, e := range exits {
		if e.Cause == locktable.CauseForceReleased || e.Cause == locktable.CauseRevoked {
			ended = append(ended, e.Session.ID)
		}
	}
	if !slices.Equal(ended, holders) {
		s.fatalf("force-release %q: got exits %s, want the holders %v, in token order", name, exitIDs(exits), holders)
	}
	s.checkExits(exits, w)
}

func countCause(exits []locktable.Exit, c locktable.Cause) int {
	n := 0
	for _, e := range exits {
		if e.Cause == c {
			n++
		}
	}
	return n
}

// forceReleaseSession ends one holder, by its session (revokes a pending
// one).
func (s *schedule) forceReleaseSession() {
	s.endOneID(s.pick(), "force-release session", s.tb.ForceReleaseSession, locktable.ErrWaiter, func(sess *mSession) bool { return sess.token == 0 }, locktable.CauseForceReleased)
}

// kick removes one waiter.
func (s *schedule) kick() {
	s.endOneID(s.pick(), "kick", s.tb.Kick, locktable.ErrHolder, func(sess *mSession) bool { return sess.token != 0 }, locktable.CauseKicked)
}

// endOneID ends session id with end (a kick or a force-release), which
// refuses a session of the other kind (wrong) with wrongErr.
func (s *schedule) endOneID(id locktable.SessionID, what string, end func(time.Time, locktable.SessionID, []locktable.Exit) ([]locktable.Exit, error),
	wrongErr error, wrong func(*mSession) bool, cause locktable.Cause) {
	s.logf("%s %d", what, id)
	exits, err := end(s.now, id, nil)
	s.checkGrantPromises(exits)
	s.checkTablePromises()
	sess := s.m.sessions[id]
	var wantErr error
	switch {
	case sess == nil:
		wantErr = locktable.ErrUnknownSession
	case wrong(sess):
		wantErr = wrongErr
	}
	if wantErr != nil {
		if !errors.Is(err, wantErr) || len(exits) != 0 {
			s.fatalf("%s %d: got %v, %s, want %v and no exits", what, id, err, exitIDs(exits), wantErr)
		}
		return
	}
	if err != nil {
		s.fatalf("%s %d: got %v, want no error", what, id, err)
	}
	w := newWant()
	w.promotedBy = id
	switch {
	case cause == locktable.CauseForceReleased && sess.pending && sess.revoked:
		// Revoked already: nothing to do.
	case cause == locktable.CauseForceReleased && sess.pending:
		sess.revoked = true
		w.exits[id] = locktable.CauseRevoked
		s.v3stats.revoked++
	default:
		s.m.remove(s.now, sess, cause, true, w)
	}
	s.checkExits(exits, w)
}

// restart drops the table, as a server that stops does, and starts a new
// one: after a clean stop (every session was told) at once, after a crash
// with a grace period of the longest lease noted. Then the clients of the
// old sessions reconnect, in a random order, each with its old request.
// In a table of version 3, a claim that goes on is not a new one: after a
// crash its client is away, to come back in the grace; after a clean stop
// it is listed (pending) in the new table, and its client is away too.
func (s *schedule) restart() {
	m := s.m
	crash := s.rng.IntN(2) == 0
	// A clean stop before the store's grace period is over counts as a
	// crash: the clients of the crashed run before were not told.
	clean := !crash && !s.now.Before(m.storeGraceEnds)
	var clients []*mSession
	for _, sess := range m.sessions {
		clients = append(clients, sess)
	}
	slices.SortFunc(clients, func(a, b *mSession) int { return int(a.id) - int(b.id) })
	s.rng.Shuffle(len(clients), func(i, j int) { clients[i], clients[j] = clients[j], clients[i] })
	var noGrant time.Time
	if !clean {
		// Holders of the crashed run were told nothing: each may believe
		// in its lock until its last heartbeat plus its lease.
		for name, ids := range m.holders {
			for _, id := range ids {
				h := m.sessions[id]
				if until := h.deadline(); until.After(m.believedUntil[name]) {
					m.believedUntil[name] = until
				}
			}
		}
		if m.maxLease > 0 {
			noGrant = s.now.Add(m.maxLease)
		}
	} else {
		m.maxLease = 0 // tokenstore drops the bound after a clean stop
	}
	m.storeGraceEnds = noGrant
	s.stats.restarts++
	if !noGrant.IsZero() {
		s.stats.graceRestarts++
	}
	handingOver := s.epoch
	s.epoch++ // a new epoch: the counters start again above every id before
	s.tokSeq, s.tktSeq = 0, 0
	var listed, rejoin []*mSession
	for _, c := range clients {
		switch {
		case c.pending: // its client is away already
			if !crash {
				listed = append(listed, c)
			}
		case s.v3 && c.v3:
			if !crash {
				listed = append(listed, c)
			}
			if !c.breaker {
				s.away = append(s.away, s.goAway(c))
			}
		case s.v3 && !crash && c.token != 0 && s.rng.IntN(4) == 0:
			// A holder of version 1 or 2 not seen closing: listed, it
			// believes until its deadline, and never comes back.
			listed = append(listed, c)
			s.away = append(s.away, &away{claim: claimOf(c), until: c.deadline(), believes: true})
		default:
			rejoin = append(rejoin, c)
		}
	}
	what := "clean stop"
	switch {
	case crash:
		what = "crash"
	case !clean:
		what = "clean stop during the grace period"
	}
	s.logf("restart after a %s: grace %v; %d claims listed, %d clients away, %d clients reconnect", what, max(noGrant.Sub(s.now), 0), len(listed), len(s.away), len(rejoin))
	m.sessions = map[locktable.SessionID]*mSession{}
	m.holders = map[string][]locktable.SessionID{}
	m.queue = map[string][]locktable.SessionID{}
	m.limit = map[string]int{}
	m.frozenThrough = map[string]uint64{}
	clear(m.tombs)
	m.graceUntil = noGrant
	// After a crash the claims of every earlier term may come back; after
	// a handover inside a grace, those of the terms before the one that
	// handed over (its own unlisted claims ended there); else none.
	switch {
	case crash:
		m.resumeBelow = s.epoch << 40
	case !clean:
		m.resumeBelow = handingOver << 40
	default:
		m.resumeBelow = 0
	}
	clear(s.lastTermGrant)
	s.tb = s.newTable(noGrant)
	s.list(listed)
	// The listed leases go into the bound before the new run serves.
	n, longest := s.tb.PendingClaims()
	var want int
	var wantLongest time.Duration
	for _, sess := range m.sessions {
		if sess.pending {
			want++
			wantLongest = max(wantLongest, sess.lease)
		}
	}
	if n != want || longest != wantLongest {
		s.fatalf("PendingClaims: got %d, %v, want %d, %v", n, longest, want, wantLongest)
	}
	m.maxLease = max(m.maxLease, longest)
	for _, c := range rejoin {
		if s.rng.IntN(8) == 0 {
			continue // this client gave up
		}
		s.acquireNew(locktable.Request{Name: c.name, Owner: c.owner, Lease: c.lease, Shared: c.shared, Limit: c.limit})
	}
}

// goAway is the client of c, away since a restart: it resumes its claim
// before its deadline. A holder granted from the queue whose grant never
// reached it resumes as the waiter it thinks it is, and believes nothing.
func (s *schedule) goAway(c *mSession) *away {
	a := &away{claim: claimOf(c), until: c.deadline(), believes: c.token != 0, resumes: true}
	if c.token != 0 && c.ticket != 0 && s.rng.IntN(8) == 0 {
		a.claim.Token, a.claim.Ticket, a.believes = 0, c.ticket, false
		s.v3stats.lostPushes++
	}
	return a
}

// check compares the whole table with the model.
func (s *schedule) check() {
	m := s.m
	s.checkTablePromises()
	if err := s.tb.CheckInvariants(); err != nil {
		s.fatalf("internal invariant: %v", err)
	}
	if got, want := s.tb.Sessions(), len(m.sessions); got != want {
		s.fatalf("Sessions: got %d, want %d", got, want)
	}
	inGrace := !m.graceUntil.IsZero()
	if until, ok := s.tb.GraceUntil(); ok != inGrace || !until.Equal(m.graceUntil) {
		s.fatalf("GraceUntil: got %v %v, want %v %v", until, ok, m.graceUntil, inGrace)
	}
	lockNames := m.names()
	if got, want := s.tb.Locks(), len(lockNames); got != want {
		s.fatalf("Locks: got %d, want %d", got, want)
	}
	snap := s.tb.Snapshot(s.now)
	if len(snap) != len(lockNames) {
		s.fatalf("Snapshot: got %d locks, want %d", len(snap), len(lockNames))
	}
	for i, li := range snap {
		if i > 0 && snap[i-1].Name >= li.Name {
			s.fatalf("Snapshot not sorted by name: %q before %q", snap[i-1].Name, li.Name)
		}
		var hids []locktable.SessionID
		for _, h := range li.Holders {
			hids = append(hids, h.ID)
			s.checkInfo(h)
		}
		if !slices.Equal(hids, m.holders[li.Name]) {
			s.fatalf("lock %q: got holders %v, want %v (grant order)", li.Name, hids, m.holders[li.Name])
		}
		if (li.Holder == nil) != (len(li.Holders) == 0) || (li.Holder != nil && *li.Holder != li.Holders[0]) {
			s.fatalf("lock %q: got Holder %+v, want the first of %v", li.Name, li.Holder, hids)
		}
		if li.Limit != m.limit[li.Name] {
			s.fatalf("lock %q: got limit %d, want %d", li.Name, li.Limit, m.limit[li.Name])
		}
		if got, ok := s.tb.Limit(li.Name); got != li.Limit || ok != (li.Limit != 0) {
			s.fatalf("Limit(%q): got %d %v, want %d", li.Name, got, ok, li.Limit)
		}
		if li.Limit > 0 && len(li.Holders) == li.Limit && li.Holders[0].Shared {
			s.stats.fullSemaphores++
		}
		var ids []locktable.SessionID
		for j, w := range li.Waiters {
			ids = append(ids, w.ID)
			if w.Position != j+1 {
				s.fatalf("lock %q: waiter %d at index %d has position %d, want %d", li.Name, w.ID, j, w.Position, j+1)
			}
			s.checkInfo(w)
		}
		if !slices.Equal(ids, m.queue[li.Name]) {
			s.fatalf("lock %q: got waiters %v, want %v (arrival order)", li.Name, ids, m.queue[li.Name])
		}
	}
	var min time.Time
	for id, sess := range m.sessions {
		in, ok := s.tb.Session(s.now, id)
		if !ok {
			s.fatalf("Session(%d): got false, want true", id)
		}
		s.checkInfo(in)
		if d := sess.deadline(); min.IsZero() || d.Before(min) {
			min = d
		}
	}
	if inGrace && (min.IsZero() || m.graceUntil.Before(min)) {
		min = m.graceUntil
	}
	d, ok := s.tb.NextDeadline()
	if ok != !min.IsZero() || !d.Equal(min) {
		s.fatalf("NextDeadline: got %v, %v, want %v", d, ok, min)
	}
}

func (s *schedule) checkInfo(in locktable.Info) {
	sess := s.m.sessions[in.ID]
	if sess == nil {
		s.fatalf("table describes session %d, which the model does not have", in.ID)
	}
	want := locktable.Info{
		ID:      sess.id,
		Name:    sess.name,
		Owner:   sess.owner,
		Lease:   sess.lease,
		Shared:  sess.shared,
		Held:    sess.token != 0,
		Token:   sess.token,
		Silent:  max(s.now.Sub(sess.lastSeen), 0),
		Since:   s.now.Sub(sess.arrived),
		Ticket:  sess.ticket,
		Attempt: sess.attempt,
		Pending: sess.pending,
		Resumed: sess.resumed,
		Frozen:  s.m.frozen(sess),
		Revoked: sess.revoked,
	}
	if sess.token != 0 {
		want.Since = s.now.Sub(sess.granted)
	} else {
		want.Position = slices.Index(s.m.queue[sess.name], sess.id) + 1
	}
	if in != want {
		s.fatalf("session %d:\ngot  %+v\nwant %+v", in.ID, in, want)
	}
}
