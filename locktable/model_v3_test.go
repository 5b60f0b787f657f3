package locktable_test

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batonlock/baton/locktable"
)

// The randomized test's claims that go on (protocol version 3). In three
// schedules of four the table has tickets, and most clients are of
// version 3: their claims move to a new session on the same server (a
// resume after silence, sometimes an older attempt answered late, or a
// waiter whose grant never reached it), and across restarts. A crash
// sends them away: each may come back by Resume during the new grace,
// before its deadline. A clean stop lists them (AddPending): each keeps
// its slot or place until it comes back or its time runs out, and some
// version 1 and 2 holders not seen closing are listed too, never to come
// back. Operators freeze claims before they end them, release pending
// holders (revoked), and now and then a client breaks the rules: it comes
// back past its deadline, or with a claim that ended (a replay), which is
// what makes conflicts.
//
// The promises, besides those of model_test.go, checked on what the table
// says:
//
//   - the queue is in ticket order, and no holder granted in this term
//     overtook a waiter (its ticket is below every waiter's);
//   - a holder that comes back keeps its token, and a waiter granted when
//     it comes back gets a new, rising one;
//   - a claim moves only to a higher attempt, never while frozen or
//     revoked, and a frozen claim is never confirmed;
//   - a pending claim is never granted;
//   - a conflict's loser leaves a holder of its name with a higher token;
//   - a claim that comes back from an earlier term never enters beside a
//     grant of this term on its name (it would be fenced out);
//   - no two clients that keep the rules believe they hold one name
//     against its rules: the holders of the table, and the clients away
//     (not yet back, before their deadline), together.

// away is a client whose claim is on no session of the table: since a
// restart, until it comes back (Resume) or gives up.
type away struct {
	claim locktable.Claim // as it resumes it; Attempt is the last it was on
	until time.Time       // its deadline: it resumes only before it, and a holder believes until it
	// believes: a holder that knows it holds (not a waiter, nor a holder
	// whose grant never reached it). resumes: a client of version 3 (a
	// version 1 or 2 holder not seen closing never comes back). harmed: a
	// client that broke the rules came back to its name, so its belief is
	// not the protocol's to keep.
	believes, resumes, harmed bool
}

// v3Stats counts what the version 3 steps exercised.
type v3Stats struct {
	moves, lateAttempts, lostPushes, admittedHolders, admittedWaiters int
	listed, pendingBack, revoked, frozen, superseded, overruled       int
	overloaded, breakers                                              int
}

func (a *v3Stats) add(b v3Stats) {
	a.moves += b.moves
	a.lateAttempts += b.lateAttempts
	a.lostPushes += b.lostPushes
	a.admittedHolders += b.admittedHolders
	a.admittedWaiters += b.admittedWaiters
	a.listed += b.listed
	a.pendingBack += b.pendingBack
	a.revoked += b.revoked
	a.frozen += b.frozen
	a.superseded += b.superseded
	a.overruled += b.overruled
	a.overloaded += b.overloaded
	a.breakers += b.breakers
}

// The model's rules for claims that go on.

// claimOf is sess's claim, as its client would carry it on: a holder by
// its token, a waiter by its ticket.
func claimOf(sess *mSession) locktable.Claim {
	c := locktable.Claim{
		Request: locktable.Request{Name: sess.name, Owner: sess.owner, Lease: sess.lease, Shared: sess.shared, Limit: sess.limit},
		Attempt: sess.attempt,
	}
	if sess.token != 0 {
		c.Token = sess.token
	} else {
		c.Ticket = sess.ticket
	}
	return c
}

// find is the session of claim c: the holder with its token, or the
// session with its ticket.
func (m *model) find(c locktable.Claim) *mSession {
	for _, sess := range m.sessions {
		if c.Token != 0 && sess.token == c.Token || c.Token == 0 && sess.ticket == c.Ticket {
			return sess
		}
	}
	return nil
}

func (m *model) frozen(sess *mSession) bool {
	return sess.frozen || sess.token != 0 && sess.token != ^uint64(0) && sess.token <= m.frozenThrough[sess.name]
}

// resume is the model's Resume, after the expiry: it moves a claim the
// table has, or admits one of an earlier term in the grace.
func (m *model) resume(now time.Time, id locktable.SessionID, c locktable.Claim, w *want) (locktable.Refusal, *mSession) {
	if sess := m.find(c); sess != nil {
		switch {
		case sess.name != c.Name || sess.shared != c.Shared || sess.lease != c.Lease || sess.shared && sess.limit != c.Limit:
			return locktable.RefusedResume, nil
		case sess.revoked:
			return locktable.RefusedRevoked, nil
		case m.frozen(sess):
			return locktable.RefusedFrozen, nil
		case c.Attempt <= sess.attempt:
			return locktable.RefusedAttempt, nil
		}
		m.move(now, sess, id, c, w)
		return locktable.NotRefused, sess
	}
	id2 := c.Token
	if id2 == 0 {
		id2 = c.Ticket
	}
	if m.graceUntil.IsZero() || id2 >= m.resumeBelow {
		return locktable.RefusedResume, nil
	}
	if refusal, ok := m.tombs[tomb{id2, c.Token == 0}]; ok {
		return refusal, nil
	}
	return m.admit(now, id, c, false, now.Add(c.Lease), w)
}

// move rebinds sess to id; a pending waiter at the head that comes back
// and may hold is granted (its token comes from the answer), and the queue
// behind it moves.
func (m *model) move(now time.Time, sess *mSession, id locktable.SessionID, c locktable.Claim, w *want) {
	old := sess.id
	w.exits[old] = locktable.CauseMoved
	w.promotedBy = old
	delete(m.sessions, old)
	sess.id = id
	m.sessions[id] = sess
	for _, list := range []map[string][]locktable.SessionID{m.holders, m.queue} {
		if i := slices.Index(list[sess.name], old); i >= 0 {
			list[sess.name][i] = id
		}
	}
	sess.owner, sess.attempt, sess.resumed, sess.lastSeen = c.Owner, c.Attempt, true, now
	if !sess.pending {
		return
	}
	sess.pending = false
	q := m.queue[sess.name]
	if sess.token == 0 && q[0] == id && m.graceUntil.IsZero() && m.mayGrant(sess.name, sess) {
		m.queue[sess.name] = q[1:]
		m.holders[sess.name] = append(m.holders[sess.name], id)
		sess.granted = now
		sess.token = ^uint64(0) // the answer's
		m.moveQueue(now, sess.name, w)
	}
}

// admit is the model's rule for a claim of an earlier term that enters:
// the conflict of holders, the limits, and (not pending) the caps.
func (m *model) admit(now time.Time, id locktable.SessionID, c locktable.Claim, pending bool, until time.Time, w *want) (locktable.Refusal, *mSession) {
	name := c.Name
	leave := map[locktable.SessionID]locktable.Cause{}
	var order []locktable.SessionID
	giveWay := func(id locktable.SessionID, cause locktable.Cause) {
		if _, ok := leave[id]; !ok {
			leave[id] = cause
			order = append(order, id)
		}
	}
	keptLimit := 0
	if c.Token != 0 {
		if c.Token <= m.frozenThrough[name] {
			return locktable.RefusedFrozen, nil
		}
		type candidate struct {
			id     locktable.SessionID // 0: c
			token  uint64
			shared bool
			limit  int
		}
		cands := []candidate{{0, c.Token, c.Shared, c.Limit}}
		for _, hid := range m.holders[name] {
			h := m.sessions[hid]
			cands = append(cands, candidate{hid, h.token, h.shared, h.limit})
		}
		slices.SortFunc(cands, func(a, b candidate) int {
			if a.token > b.token {
				return -1
			}
			return 1
		})
		exclusive, shared, limit, kept := false, 0, 0, false
		for _, k := range cands {
			ok := false
			if !k.shared {
				ok = !exclusive && shared == 0
				exclusive = exclusive || ok
			} else if ok = !exclusive && (shared == 0 || k.limit == limit) && shared < k.limit; ok {
				shared++
				limit = k.limit
			}
			if k.id == 0 {
				kept = ok
			} else if !ok {
				giveWay(k.id, locktable.CauseSuperseded)
			}
		}
		if !kept {
			return locktable.RefusedSuperseded, nil
		}
		if shared > 0 {
			keptLimit = limit
		}
	} else if c.Shared {
		for _, hid := range m.holders[name] {
			if h := m.sessions[hid]; h.shared && h.limit != c.Limit {
				return locktable.RefusedLimit, nil
			}
		}
		for _, wid := range m.queue[name] {
			if q := m.sessions[wid]; q.shared && q.carried && q.limit != c.Limit {
				return locktable.RefusedLimit, nil
			}
		}
		keptLimit = c.Limit
	}
	if keptLimit != 0 {
		for _, wid := range m.queue[name] {
			if q := m.sessions[wid]; q.shared && q.limit != keptLimit {
				giveWay(wid, locktable.CauseLimitOverruled)
			}
		}
	}
	if c.Token == 0 && !pending {
		if m.maxSessions > 0 && len(m.sessions)-len(leave) >= m.maxSessions {
			return locktable.RefusedSessions, nil
		}
		if q := m.queue[name]; m.maxWaiters > 0 && len(q)-len(leave) >= m.maxWaiters {
			var newest *mSession
			for i := len(q) - 1; i >= 0 && newest == nil; i-- {
				if _, goes := leave[q[i]]; !goes {
					newest = m.sessions[q[i]]
				}
			}
			if newest == nil || newest.ticket < c.Ticket {
				return locktable.RefusedWaiters, nil
			}
			giveWay(newest.id, locktable.CauseOverloaded)
		}
	}
	for _, lid := range order {
		m.drop(m.sessions[lid], leave[lid])
		w.exits[lid] = leave[lid]
	}
	sess := &mSession{
		id: id, name: name, owner: c.Owner, shared: c.Shared, lease: c.Lease,
		lastSeen: until.Add(-c.Lease), arrived: now, granted: now,
		token: c.Token, ticket: c.Ticket, attempt: c.Attempt,
		v3: true, pending: pending, carried: true, resumed: !pending,
	}
	if c.Shared {
		sess.limit = c.Limit
	}
	m.sessions[id] = sess
	if c.Shared {
		m.limit[name] = c.Limit
	}
	if c.Token != 0 {
		h := m.holders[name]
		i := len(h)
		for i > 0 && m.sessions[h[i-1]].token > c.Token {
			i--
		}
		m.holders[name] = slices.Insert(h, i, id)
	} else {
		q := m.queue[name]
		i := len(q)
		for i > 0 && m.sessions[q[i-1]].ticket > c.Ticket {
			i--
		}
		m.queue[name] = slices.Insert(q, i, id)
	}
	if m.graceUntil.IsZero() {
		m.moveQueue(now, name, w)
	}
	return locktable.NotRefused, sess
}

// The steps.

// resume sends claim c on a new session, as a client's resume does, and
// checks the answer: first the promises, then the model. breaker says the
// client breaks the rules (its belief is not counted). The lease is
// noted before, as for an ACQUIRE.
func (s *schedule) resume(c locktable.Claim, breaker bool, what string) (locktable.State, locktable.Refusal) {
	id := s.nextID
	s.nextID++
	s.logf("%s: resume as %d %q token %x ticket %x attempt %d lease %v shared %v limit %d", what, id, c.Name, c.Token, c.Ticket, c.Attempt, c.Lease, c.Shared, c.Limit)
	s.m.maxLease = max(s.m.maxLease, c.Lease)
	// What the table says of the claim before, to hold it to its word.
	var before locktable.Info
	known := false
	if old := s.m.find(c); old != nil && !old.overdue(s.now) { // the call expires it first
		before, known = s.tb.Session(s.now, old.id)
	}
	_, buried := s.m.tombs[tomb{max(c.Token, c.Ticket), c.Token == 0}] // a loss of this grace, told again
	if breaker && c.Token != 0 {
		s.breakers[c.Token] = true
		for _, a := range s.away {
			if a.claim.Name == c.Name {
				a.harmed = true
			}
		}
	}
	st, ref, exits, err := s.tb.Resume(s.now, id, c, nil)
	if err != nil {
		s.fatalf("resume: got error %v, want none", err)
	}
	// The expiry's exits come first; then those of the resume, whose own
	// grant (a pending waiter's) comes before the grants behind it.
	k := slices.IndexFunc(exits, func(e locktable.Exit) bool {
		switch e.Cause {
		case locktable.CauseMoved, locktable.CauseSuperseded, locktable.CauseLimitOverruled, locktable.CauseOverloaded, locktable.CauseQueueMoved:
			return true
		}
		return false
	})
	if k < 0 {
		k = len(exits)
	}
	s.checkGrantPromises(exits[:k])
	if ref == locktable.NotRefused {
		switch {
		case c.Token != 0 && (!st.Held || st.Token != c.Token):
			s.fatalf("promise broken: holder of token %x came back: got %+v, want it holding with its token", c.Token, st)
		case known && c.Attempt <= before.Attempt:
			s.fatalf("promise broken: claim of session %d moved to attempt %d from attempt %d", before.ID, c.Attempt, before.Attempt)
		case known && (before.Frozen || before.Revoked):
			s.fatalf("promise broken: claim of session %d moved while frozen %v, revoked %v", before.ID, before.Frozen, before.Revoked)
		case c.Token != 0 && !known && s.lastTermGrant[c.Name] != 0:
			s.fatalf("promise broken: token %x of an earlier term entered %q after the grant of %x in this term", c.Token, c.Name, s.lastTermGrant[c.Name])
		case st.Held && known && before.Pending && !before.Held:
			s.checkGrant(id, c.Name, st.Token) // a pending waiter granted as it came back
		}
	} else if breaker && c.Token != 0 {
		delete(s.breakers, c.Token)
	}
	s.checkGrantPromises(exits[k:])
	s.checkTablePromises()
	// The higher tokens win: a loser leaves a holder with a higher token.
	higher := func(name string, token uint64) bool {
		li, _ := s.tb.Lock(s.now, name)
		return slices.ContainsFunc(li.Holders, func(h locktable.Info) bool { return h.Token > token })
	}
	for _, e := range exits[k:] {
		if e.Cause == locktable.CauseSuperseded && !higher(e.Session.Name, e.Session.Token) {
			s.fatalf("promise broken: %d with token %x lost a conflict on %q to no higher token", e.Session.ID, e.Session.Token, e.Session.Name)
		}
	}
	if ref == locktable.RefusedSuperseded && !buried && !higher(c.Name, c.Token) {
		s.fatalf("promise broken: token %x refused as superseded on %q by no higher token", c.Token, c.Name)
	}

	w := newWant()
	s.m.expireAll(s.now, w)
	s.checkExits(exits[:k], w, s.m.endGraceIfDue(s.now)...)
	w = newWant()
	wantRef, sess := s.m.resume(s.now, id, c, w)
	if ref != wantRef {
		s.fatalf("resume: got refusal %v, want %v", ref, wantRef)
	}
	if ref != locktable.NotRefused {
		if st != (locktable.State{}) {
			s.fatalf("refused resume: got state %+v, want the zero state", st)
		}
		s.checkExits(exits[k:], w)
		return st, ref
	}
	if sess.token == ^uint64(0) {
		sess.token = st.Token
	}
	for _, e := range exits[k:] {
		switch e.Cause {
		case locktable.CauseSuperseded:
			s.v3stats.superseded++
		case locktable.CauseLimitOverruled:
			s.v3stats.overruled++
		case locktable.CauseOverloaded:
			s.v3stats.overloaded++
		}
	}
	s.checkExits(exits[k:], w)
	sess.breaker = breaker
	s.checkState(sess, st)
	switch {
	case known:
		s.v3stats.moves++
		if before.Pending {
			s.v3stats.pendingBack++
		}
	case c.Token != 0:
		s.v3stats.admittedHolders++
	default:
		s.v3stats.admittedWaiters++
	}
	if breaker {
		s.v3stats.breakers++
	}
	return st, ref
}

// move resumes a live claim on the same server: mostly a higher attempt;
// now and then an older one answered late, another lease (not the claim),
// or a holder granted from the queue whose grant never reached it (it
// resumes by its ticket).
func (s *schedule) move() {
	var ids []locktable.SessionID
	for id, sess := range s.m.sessions {
		if sess.v3 && !sess.pending && !sess.breaker {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	sess := s.m.sessions[ids[s.rng.IntN(len(ids))]]
	c := claimOf(sess)
	if sess.token != 0 && sess.ticket != 0 && s.rng.IntN(4) == 0 {
		c.Token, c.Ticket = 0, sess.ticket
		s.v3stats.lostPushes++
	}
	switch r := s.rng.IntN(10); {
	case r < 2:
		c.Attempt -= uint32(s.rng.IntN(int(c.Attempt) + 1)) // late
		s.v3stats.lateAttempts++
	case r < 3:
		c.Attempt++
		c.Lease++ // not the claim
	default:
		c.Attempt += 1 + uint32(s.rng.IntN(2))
	}
	s.resume(c, false, "move")
}

// comeBack is a client away that comes back (Resume), before its deadline,
// or now and then past it, breaking the rules.
func (s *schedule) comeBack() {
	if len(s.away) == 0 {
		return
	}
	i := s.rng.IntN(len(s.away))
	a := s.away[i]
	breaks := false
	if !a.resumes || !s.now.Before(a.until) {
		if !a.resumes || s.rng.IntN(10) != 0 {
			if !s.now.Before(a.until) {
				s.away = slices.Delete(s.away, i, i+1) // it gave up
			}
			return
		}
		breaks = true
	}
	s.away = slices.Delete(s.away, i, i+1)
	a.claim.Attempt += 1 + uint32(s.rng.IntN(2))
	what := "come back"
	if breaks {
		what = "come back past its deadline"
	}
	if _, ref := s.resume(a.claim, breaks, what); ref == locktable.RefusedSessions || ref == locktable.RefusedWaiters {
		s.away = append(s.away, a) // OVERLOADED: it tries again
	}
}

// stale resumes a claim that ended: a client that breaks the rules, or a
// replay. It is what makes conflicts.
func (s *schedule) stale() {
	if len(s.m.ended) == 0 {
		return
	}
	c := s.m.ended[s.rng.IntN(len(s.m.ended))]
	c.Attempt = 1000 + uint32(s.rng.IntN(100))
	s.resume(c, true, "stale claim")
}

// freeze freezes a session, as a server does when it accepts a release
// or a kick; endFrozen then ends one, as it does once the record is in.
func (s *schedule) freeze() {
	id := s.pick()
	s.logf("freeze %d", id)
	before, known := s.tb.Session(s.now, id)
	err := s.tb.Freeze(id)
	sess := s.m.sessions[id]
	if sess == nil {
		if !errors.Is(err, locktable.ErrUnknownSession) {
			s.fatalf("freeze of absent %d: got %v, want ErrUnknownSession", id, err)
		}
		return
	}
	if err != nil || !known {
		s.fatalf("freeze %d: got %v, want no error", id, err)
	}
	if !before.Frozen {
		s.v3stats.frozen++
	}
	sess.frozen = true
	s.checkTablePromises()
}

func (s *schedule) endFrozen() {
	var ids []locktable.SessionID
	for id, sess := range s.m.sessions {
		if s.m.frozen(sess) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	id := ids[s.rng.IntN(len(ids))]
	if s.m.sessions[id].token != 0 {
		s.endOneID(id, "end frozen holder", s.tb.ForceReleaseSession, locktable.ErrWaiter, func(sess *mSession) bool { return sess.token == 0 }, locktable.CauseForceReleased)
	} else {
		s.endOneID(id, "end frozen waiter", s.tb.Kick, locktable.ErrHolder, func(sess *mSession) bool { return sess.token != 0 }, locktable.CauseKicked)
	}
}

// list enters the claims of a clean stop in the new table, as pending:
// every claim of version 3 (which its client will resume), and each
// version 1 or 2 holder not seen closing (never back, but believed until
// its deadline).
func (s *schedule) list(listed []*mSession) {
	for _, c := range listed {
		id := s.nextID
		s.nextID++
		cl := claimOf(c)
		cl.Token, cl.Ticket = c.token, c.ticket // a holder with its ticket too
		until := c.deadline()
		s.logf("list %d as %d %q token %x ticket %x until +%v", c.id, id, c.name, c.token, c.ticket, until.Sub(t0))
		ref, exits, err := s.tb.AddPending(s.now, id, cl, until, nil)
		if err != nil {
			s.fatalf("list: got error %v, want none", err)
		}
		s.checkGrantPromises(exits)
		s.checkTablePromises()
		w := newWant()
		wantRef, sess := s.m.admit(s.now, id, cl, true, until, w)
		if ref != wantRef {
			s.fatalf("list: got refusal %v, want %v", ref, wantRef)
		}
		s.checkExits(exits, w)
		if sess != nil {
			sess.v3, sess.breaker = c.v3, c.breaker
			s.v3stats.listed++
		}
	}
}

// checkBeliefs checks that no two clients that keep the rules believe they
// hold a name against its rules: the table's holders (a pending one is its
// client, away) and the clients away before their deadline.
func (s *schedule) checkBeliefs(snap []locktable.LockInfo) {
	type belief struct {
		shared bool
		limit  int
		who    string
	}
	per := map[string][]belief{}
	for _, li := range snap {
		for _, h := range li.Holders {
			if !h.Pending && !s.breakers[h.Token] {
				per[li.Name] = append(per[li.Name], belief{h.Shared, li.Limit, fmt.Sprintf("holder %d (token %x)", h.ID, h.Token)})
			}
		}
	}
	for _, a := range s.away {
		if a.believes && !a.harmed && s.now.Before(a.until) && !s.breakers[a.claim.Token] {
			per[a.claim.Name] = append(per[a.claim.Name], belief{a.claim.Shared, a.claim.Limit,
				fmt.Sprintf("client away with token %x until +%v", a.claim.Token, a.until.Sub(t0))})
		}
	}
	for _, name := range names {
		bs := per[name]
		exclusive, shared, limit := 0, 0, 0
		for _, b := range bs {
			switch {
			case !b.shared:
				exclusive++
			case limit == 0 || limit == b.limit:
				shared++
				limit = b.limit
			default:
				shared = 1 << 30 // two limits
			}
		}
		if exclusive > 1 || exclusive == 1 && len(bs) > 1 || shared > limit {
			s.fatalf("promise broken: on %q these believe they hold together: %+v", name, bs)
		}
	}
}
