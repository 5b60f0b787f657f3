package locktable_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

// The randomized test. It runs random schedules against a reference model
// kept here, as simple as it can be, and compares after every step. The
// events: acquire, heartbeat (seen), silence (advance), close (release),
// reset (a release and the client's reconnect as a new session), expire,
// force-release, kick, and restart: the table is dropped, as a server that
// stops cleanly or crashes drops it, and a new one starts with the token
// counter moved on (as tokenstore.Open moves the epoch) and, after a
// crash, a grace period as long as the longest lease noted (the bound that
// tokenstore keeps); then the clients reconnect in a random order.
//
// Besides agreeing with the model, every grant is checked against the
// promises: its token is larger than every earlier one, and after a crash
// no lock is granted while a holder of the crashed run could still believe
// it holds (its last heartbeat plus its lease).

var (
	seedFlag      = flag.Uint64("seed", 0, "run only the randomized schedule with this seed, logging every step")
	schedulesFlag = flag.Int("schedules", 2000, "number of randomized schedules")
)

type mSession struct {
	id       locktable.SessionID
	name     string
	owner    string
	lease    time.Duration
	lastSeen time.Time
	arrived  time.Time // ACQUIRE
	granted  time.Time
	token    uint64 // 0 while waiting
}

func (s *mSession) overdue(now time.Time) bool { return !s.lastSeen.Add(s.lease).After(now) }

type model struct {
	maxSessions, maxWaiters int
	sessions                map[locktable.SessionID]*mSession
	holder                  map[string]locktable.SessionID
	queue                   map[string][]locktable.SessionID // arrival order
	lastToken               map[string]uint64
	globalToken             uint64

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
}

// wantExit is what the model expects of one exit.
type wantExit struct {
	cause    locktable.Cause
	promoted locktable.SessionID // 0: none
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
	tok     uint64 // the last token handed out
	stats   scheduleStats
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
	for i := 0; i < n; i++ {
		st := runSchedule(t, base+uint64(i), false)
		total.steps += st.steps
		total.restarts += st.restarts
		total.graceRestarts += st.graceRestarts
		total.graceGrants += st.graceGrants
	}
	t.Logf("%d schedules: %d steps, %d restarts (%d with a grace period), %d grants at the end of a grace period",
		n, total.steps, total.restarts, total.graceRestarts, total.graceGrants)
}

// scheduleStats counts what a schedule exercised.
type scheduleStats struct {
	steps, restarts, graceRestarts, graceGrants int
}

var names = []string{"a", "b", "c"}

func runSchedule(t *testing.T, seed uint64, verbose bool) scheduleStats {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m := &model{
		sessions:      map[locktable.SessionID]*mSession{},
		holder:        map[string]locktable.SessionID{},
		queue:         map[string][]locktable.SessionID{},
		lastToken:     map[string]uint64{},
		believedUntil: map[string]time.Time{},
	}
	if rng.IntN(3) == 0 {
		m.maxSessions = 3 + rng.IntN(6)
	}
	if rng.IntN(3) == 0 {
		m.maxWaiters = 1 + rng.IntN(3)
	}
	s := &schedule{t: t, seed: seed, verbose: verbose, rng: rng, m: m, now: t0, nextID: 1}
	s.tb = s.newTable(time.Time{})
	s.logf("config: max sessions %d, max waiters %d", m.maxSessions, m.maxWaiters)
	steps := 100 + rng.IntN(200)
	for s.step = 1; s.step <= steps; s.step++ {
		switch r := rng.IntN(100); {
		case r < 28:
			s.acquire()
		case r < 52:
			s.seen()
		case r < 69:
			s.advance()
		case r < 76:
			s.release()
		case r < 80:
			s.reset()
		case r < 87:
			s.expire()
		case r < 92:
			s.forceRelease()
		case r < 97:
			s.kick()
		default:
			s.restart()
		}
		s.check()
	}
	s.stats.steps = steps
	return s.stats
}

// newTable starts a table whose tokens continue from the last one, as a
// restarted server's do from its token store, with grace until noGrant.
func (s *schedule) newTable(noGrant time.Time) *locktable.Table {
	return locktable.New(locktable.Config{
		MaxSessions:       s.m.maxSessions,
		MaxWaitersPerLock: s.m.maxWaiters,
		NextToken:         func() uint64 { s.tok++; return s.tok },
		NoGrantBefore:     noGrant,
	})
}

// pick returns a session id: mostly one in the table, sometimes one that
// left or never was.
func (s *schedule) pick() locktable.SessionID {
	if len(s.m.sessions) == 0 || s.rng.IntN(10) == 0 {
		return locktable.SessionID(1 + s.rng.IntN(int(s.nextID)))
	}
	ids := make([]locktable.SessionID, 0, len(s.m.sessions))
	for id := range s.m.sessions {
		ids = append(ids, id)
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
				due := sess.lastSeen.Add(sess.lease).Add(-time.Duration(s.rng.IntN(2)))
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

// expireAll is the model's expiry: every session silent for its lease is
// out; a lock whose holder went passes to its first live waiter.
func (m *model) expireAll(now time.Time, want map[locktable.SessionID]wantExit) {
	var gone []locktable.SessionID
	for id, sess := range m.sessions {
		if sess.overdue(now) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		sess := m.sessions[id]
		if sess == nil || !sess.overdue(now) {
			continue // already taken out with its lock
		}
		if sess.token != 0 {
			m.removeHolder(now, sess, locktable.CauseExpired, want)
		} else {
			m.removeWaiter(sess)
			want[id] = wantExit{cause: locktable.CauseExpired}
		}
	}
}

// endGraceIfDue ends the grace period at now, if it is due, granting the
// head of every queue; it returns the promoted sessions in name order.
func (m *model) endGraceIfDue(now time.Time) []locktable.SessionID {
	if m.graceUntil.IsZero() || now.Before(m.graceUntil) {
		return nil
	}
	m.graceUntil = time.Time{}
	var promoted []locktable.SessionID
	for _, name := range m.names() {
		q := m.queue[name]
		if _, held := m.holder[name]; held || len(q) == 0 {
			continue
		}
		next := m.sessions[q[0]]
		m.holder[name] = next.id
		next.granted = now
		next.token = ^uint64(0) // filled in from the table's grant
		m.queue[name] = q[1:]
		promoted = append(promoted, next.id)
	}
	return promoted
}

// names are the names with a holder or waiters, sorted.
func (m *model) names() []string {
	var out []string
	for _, name := range names {
		if _, held := m.holder[name]; held || len(m.queue[name]) > 0 {
			out = append(out, name)
		}
	}
	return out
}

func (m *model) removeWaiter(sess *mSession) {
	m.queue[sess.name] = slices.DeleteFunc(m.queue[sess.name], func(id locktable.SessionID) bool { return id == sess.id })
	delete(m.sessions, sess.id)
}

// removeHolder takes the holder out and promotes the first live waiter; the
// overdue waiters ahead of it expire. Overdue waiters behind it are left for
// the next expiry.
func (m *model) removeHolder(now time.Time, sess *mSession, cause locktable.Cause, want map[locktable.SessionID]wantExit) {
	delete(m.sessions, sess.id)
	delete(m.holder, sess.name)
	w := wantExit{cause: cause}
	live := m.queue[sess.name]
	for len(live) > 0 && m.sessions[live[0]].overdue(now) {
		delete(m.sessions, live[0])
		want[live[0]] = wantExit{cause: locktable.CauseExpired}
		live = live[1:]
	}
	if len(live) > 0 {
		next := m.sessions[live[0]]
		m.holder[sess.name] = next.id
		next.granted = now
		next.token = ^uint64(0) // filled in from the table's grant
		w.promoted = next.id
		live = live[1:]
	}
	m.queue[sess.name] = live
	want[sess.id] = w
}

// checkExits compares the table's exits with the model's expectations and
// records the tokens of the promotions. graceGrants are the grants at the
// end of the grace period, in name order: they come after every other exit.
func (s *schedule) checkExits(exits []locktable.Exit, want map[locktable.SessionID]wantExit, graceGrants ...locktable.SessionID) {
	cut := len(exits) - len(graceGrants)
	if cut < 0 {
		s.fatalf("got exits %s, want at least the %d grants at the end of the grace period %v", exitIDs(exits), len(graceGrants), graceGrants)
	}
	s.stats.graceGrants += len(graceGrants)
	for i, id := range graceGrants {
		e := exits[cut+i]
		if e.Cause != locktable.CauseGraceEnded || !e.HasPromoted || e.Promoted.ID != id || e.Session != (locktable.Info{}) {
			s.fatalf("exit %d of %s: got cause %v promoted %v %d, want the end of grace granting %d (grants %v)",
				cut+i, exitIDs(exits), e.Cause, e.HasPromoted, e.Promoted.ID, id, graceGrants)
		}
		p := s.m.sessions[id]
		if e.Promoted.Name != p.name || e.Promoted.Waited != s.now.Sub(p.arrived) {
			s.fatalf("grace grant of %d: got %+v, want name %q waited %v", id, e.Promoted, p.name, s.now.Sub(p.arrived))
		}
		s.grant(p, e.Promoted.Token)
	}
	exits = exits[:cut]
	if len(exits) != len(want) {
		s.fatalf("got exits %s, want %d: %v", exitIDs(exits), len(want), want)
	}
	left := map[locktable.SessionID]bool{}
	for _, e := range exits {
		if left[e.Session.ID] {
			s.fatalf("got exits %s: session %d left twice", exitIDs(exits), e.Session.ID)
		}
		left[e.Session.ID] = true
		w, ok := want[e.Session.ID]
		if !ok {
			s.fatalf("got exits %s; session %d should not have left", exitIDs(exits), e.Session.ID)
		}
		if e.Cause != w.cause {
			s.fatalf("exit of %d: got cause %v, want %v", e.Session.ID, e.Cause, w.cause)
		}
		if e.Cause == locktable.CauseExpired && e.Session.Silent < e.Session.Lease {
			s.fatalf("exit of %d: expired after %v of silence, before its lease %v", e.Session.ID, e.Session.Silent, e.Session.Lease)
		}
		if e.HasPromoted != (w.promoted != 0) || (e.HasPromoted && e.Promoted.ID != w.promoted) {
			s.fatalf("exit of %d: got promoted %v %d, want %d", e.Session.ID, e.HasPromoted, e.Promoted.ID, w.promoted)
		}
		if e.HasPromoted {
			p := s.m.sessions[w.promoted]
			if e.Promoted.Name != p.name {
				s.fatalf("promotion of %d: got name %q, want %q", p.id, e.Promoted.Name, p.name)
			}
			if want := s.now.Sub(p.arrived); e.Promoted.Waited != want {
				s.fatalf("promotion of %d: got Waited %v, want %v", p.id, e.Promoted.Waited, want)
			}
			s.grant(p, e.Promoted.Token)
		}
	}
}

// grant checks a new grant and records its token.
func (s *schedule) grant(p *mSession, token uint64) {
	if until := s.m.believedUntil[p.name]; s.now.Before(until) {
		s.fatalf("grant to %d of %q at +%v: a holder of the crashed run may believe it holds the lock until +%v",
			p.id, p.name, s.now.Sub(t0), until.Sub(t0))
	}
	if token <= s.m.lastToken[p.name] || token <= s.m.globalToken {
		s.fatalf("grant to %d of %q: got token %d, want more than %d (the name's last) and %d (the last of all)",
			p.id, p.name, token, s.m.lastToken[p.name], s.m.globalToken)
	}
	p.token = token
	s.m.lastToken[p.name] = token
	s.m.globalToken = token
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
	r := locktable.Request{
		Name:   names[s.rng.IntN(len(names))],
		Owner:  fmt.Sprintf("o%d", id),
		Lease:  s.randomLease(),
		NoWait: s.rng.IntN(6) == 0,
	}
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
	s.logf("acquire %d %q lease %v nowait %v", id, r.Name, r.Lease, r.NoWait)
	s.m.maxLease = max(s.m.maxLease, r.Lease)
	st, ref, exits, err := s.tb.Acquire(s.now, id, r, nil)
	if err != nil {
		s.fatalf("acquire: got error %v, want none", err)
	}
	want := map[locktable.SessionID]wantExit{}
	s.m.expireAll(s.now, want)
	s.checkExits(exits, want, s.m.endGraceIfDue(s.now)...)

	m := s.m
	var wantRef locktable.Refusal
	_, held := m.holder[r.Name]
	inGrace := !m.graceUntil.IsZero()
	// During grace a lock with waiters is as good as held.
	busy := held || (inGrace && len(m.queue[r.Name]) > 0)
	switch {
	case m.maxSessions > 0 && len(m.sessions) >= m.maxSessions:
		wantRef = locktable.RefusedSessions
	case inGrace && r.NoWait:
		wantRef = locktable.RefusedGrace
	case busy && r.NoWait:
		wantRef = locktable.RefusedBusy
	case busy && m.maxWaiters > 0 && len(m.queue[r.Name]) >= m.maxWaiters:
		wantRef = locktable.RefusedWaiters
	}
	if ref != wantRef {
		s.fatalf("acquire %d: got refusal %v, want %v", id, ref, wantRef)
	}
	if ref != locktable.NotRefused {
		if st != (locktable.State{}) {
			s.fatalf("refused acquire: got state %+v, want the zero state", st)
		}
		return
	}
	sess := &mSession{id: id, name: r.Name, owner: r.Owner, lease: r.Lease, lastSeen: s.now, arrived: s.now}
	m.sessions[id] = sess
	if !held && !inGrace {
		if !st.Held {
			s.fatalf("acquire %d of free %q: got %+v, want held", id, r.Name, st)
		}
		m.holder[r.Name] = id
		sess.granted = s.now
		s.grant(sess, st.Token)
		return
	}
	m.queue[r.Name] = append(m.queue[r.Name], id)
	if st.Held || st.Position != len(m.queue[r.Name]) {
		s.fatalf("acquire %d of held %q: got %+v, want waiting at %d", id, r.Name, st, len(m.queue[r.Name]))
	}
}

func (s *schedule) seen() {
	id := s.pick()
	s.logf("seen %d", id)
	st, ok := s.tb.Seen(s.now, id)
	sess := s.m.sessions[id]
	if sess == nil || sess.overdue(s.now) {
		if ok {
			s.fatalf("seen %d: got %+v, true, want false (gone or overdue)", id, st)
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

func (s *schedule) release() { s.releaseID(s.pick(), "release") }

// reset is a connection reset followed by the client's reconnect: the
// session leaves as by a close, and the client enters again as a new
// session at the back of the queue.
func (s *schedule) reset() {
	id := s.pick()
	sess := s.m.sessions[id]
	s.releaseID(id, "reset")
	if sess != nil {
		s.acquireNew(locktable.Request{Name: sess.name, Owner: sess.owner, Lease: sess.lease})
	}
}

func (s *schedule) releaseID(id locktable.SessionID, what string) {
	s.logf("%s %d", what, id)
	exits, ok := s.tb.Release(s.now, id, nil)
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
	want := map[locktable.SessionID]wantExit{}
	if sess.token != 0 {
		s.m.removeHolder(s.now, sess, locktable.CauseReleased, want)
	} else {
		s.m.removeWaiter(sess)
		want[id] = wantExit{cause: locktable.CauseReleased}
	}
	s.checkExits(exits, want)
}

func (s *schedule) expire() {
	s.logf("expire")
	exits := s.tb.Expire(s.now, nil)
	want := map[locktable.SessionID]wantExit{}
	s.m.expireAll(s.now, want)
	s.checkExits(exits, want, s.m.endGraceIfDue(s.now)...)
	for id := range s.m.sessions {
		in, ok := s.tb.Session(s.now, id)
		if !ok || in.Silent >= in.Lease {
			s.fatalf("after Expire: session %d: got %+v, %v, want it present and silent less than its lease", id, in, ok)
		}
	}
}

func (s *schedule) forceRelease() {
	name := names[s.rng.IntN(len(names))]
	s.logf("force-release %q", name)
	exits, err := s.tb.ForceRelease(s.now, name, nil)
	hid, held := s.m.holder[name]
	if !held {
		if !errors.Is(err, locktable.ErrNotHeld) || len(exits) != 0 {
			s.fatalf("force-release of free %q: got %v, %s, want ErrNotHeld and none", name, err, exitIDs(exits))
		}
		return
	}
	if err != nil {
		s.fatalf("force-release %q: got %v, want no error", name, err)
	}
	want := map[locktable.SessionID]wantExit{}
	s.m.removeHolder(s.now, s.m.sessions[hid], locktable.CauseForceReleased, want)
	s.checkExits(exits, want)
}

func (s *schedule) kick() {
	id := s.pick()
	s.logf("kick %d", id)
	exits, err := s.tb.Kick(s.now, id, nil)
	sess := s.m.sessions[id]
	var wantErr error
	switch {
	case sess == nil:
		wantErr = locktable.ErrUnknownSession
	case sess.token != 0:
		wantErr = locktable.ErrHolder
	}
	if wantErr != nil {
		if !errors.Is(err, wantErr) || len(exits) != 0 {
			s.fatalf("kick %d: got %v, %s, want %v and no exits", id, err, exitIDs(exits), wantErr)
		}
		return
	}
	if err != nil {
		s.fatalf("kick %d: got %v, want no error", id, err)
	}
	s.m.removeWaiter(sess)
	s.checkExits(exits, map[locktable.SessionID]wantExit{id: {cause: locktable.CauseKicked}})
}

// restart drops the table, as a server that stops does, and starts a new
// one: after a clean stop (every session was told) at once, after a crash
// with a grace period of the longest lease noted. Then the clients of the
// old sessions reconnect, in a random order, each with its old request.
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
		for name, id := range m.holder {
			h := m.sessions[id]
			if until := h.lastSeen.Add(h.lease); until.After(m.believedUntil[name]) {
				m.believedUntil[name] = until
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
	s.tok += 1 << 10 // a new epoch: the counter moves on
	what := "clean stop"
	switch {
	case crash:
		what = "crash"
	case !clean:
		what = "clean stop during the grace period"
	}
	s.logf("restart after a %s: grace %v; %d clients reconnect", what, max(noGrant.Sub(s.now), 0), len(clients))
	m.sessions = map[locktable.SessionID]*mSession{}
	m.holder = map[string]locktable.SessionID{}
	m.queue = map[string][]locktable.SessionID{}
	m.graceUntil = noGrant
	s.tb = s.newTable(noGrant)
	for _, c := range clients {
		if s.rng.IntN(8) == 0 {
			continue // this client gave up
		}
		s.acquireNew(locktable.Request{Name: c.name, Owner: c.owner, Lease: c.lease})
	}
}

// check compares the whole table with the model.
func (s *schedule) check() {
	m := s.m
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
	for _, name := range names {
		_, held := m.holder[name]
		if len(m.queue[name]) > 0 && !held && !inGrace {
			s.fatalf("model: lock %q has waiters and no holder outside the grace period", name)
		}
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
		hid, ok := m.holder[li.Name]
		if ok != (li.Holder != nil) || (ok && li.Holder.ID != hid) {
			s.fatalf("lock %q: got holder %+v, want %d (held %v)", li.Name, li.Holder, hid, ok)
		}
		if li.Holder != nil {
			s.checkInfo(*li.Holder)
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
		if d := sess.lastSeen.Add(sess.lease); min.IsZero() || d.Before(min) {
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
		ID:     sess.id,
		Name:   sess.name,
		Owner:  sess.owner,
		Lease:  sess.lease,
		Held:   sess.token != 0,
		Token:  sess.token,
		Silent: s.now.Sub(sess.lastSeen),
		Since:  s.now.Sub(sess.arrived),
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
