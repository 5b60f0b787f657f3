package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/locktable"
)

// Protocol version 3 (docs/protocol.md, section 14): a claim whose
// connection the server side ended is carried to a new connection by its
// client, with a credential the server gave it, and keeps its token or its
// place. This file holds the server's part: what a version 3 session keeps
// of its claim, the frames that carry its credential, and the resume (an
// ACQUIRE with RESUME), checked in the spec's order and answered by its
// table of answers.

// v3claim is what a session of version 3 keeps of its claim with a
// credential: what the credential covers, and the generation of the last
// one it was sent. A session of version 1 or 2, or of version 3 without a
// credential, has none.
type v3claim struct {
	name    string
	leaseMs uint32
	limit   uint16
	shared  bool
	// gen is the generation of the newest credential sent; a reply after
	// a new generation began carries a fresh one.
	gen uint32
	// ticket is the waiter's ticket (the place it queued at).
	ticket uint64
	// resumedFrom is the epoch of the token or ticket its resume named; 0
	// if it never resumed.
	resumedFrom uint64
	// clientKey is ClientKeyHash of the client's certificate under mutual
	// TLS; nil without one.
	clientKey *[wire.ClientKeySize]byte
}

// clientKeyOf is the client key of conn: SHA-256 of the SubjectPublicKeyInfo
// of the certificate its client presented; nil without one.
func clientKeyOf(conn net.Conn) *[wire.ClientKeySize]byte {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil
	}
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	k := wire.ClientKeyHash(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
	return &k
}

func (v *v3claim) key() []byte {
	if v.clientKey == nil {
		return nil
	}
	return v.clientKey[:]
}

// resumable reports whether a claim of version 3 with lease is given a
// credential now. mu need not be held.
func (s *Server) resumable(lease time.Duration) bool {
	if s.cfg.Resume == nil || (s.cfg.ResumeMaxLease > 0 && lease > s.cfg.ResumeMaxLease) {
		return false
	}
	_, _, _, ok := s.cfg.Resume.Credentials()
	return ok
}

// newV3Locked is the version 3 state of session c, which has entered the
// table in state st with req; nil when the claim gets no credential. mu
// must be held.
func (s *Server) newV3Locked(now time.Time, c *session, req wire.Acquire, st locktable.State) *v3claim {
	lease := time.Duration(req.LeaseMs) * time.Millisecond
	if !s.resumable(lease) {
		return nil
	}
	v := &v3claim{name: req.Name, leaseMs: req.LeaseMs, limit: req.Limit, shared: req.Shared(), clientKey: clientKeyOf(c.conn)}
	if !st.Held {
		if in, ok := s.table.Session(now, c.id); ok {
			v.ticket = in.Ticket
		}
	}
	return v
}

// credential computes v's credential for id as a holder (its token) or a
// waiter (its ticket), in the current generation; false when none can be
// given now.
func (s *Server) credential(v *v3claim, held bool, id uint64) (wire.Credential, uint32, bool) {
	m, cid, gen, ok := s.cfg.Resume.Credentials()
	if !ok {
		return wire.Credential{}, 0, false
	}
	role := wire.RoleWaiter
	if held {
		role = wire.RoleHolder
	}
	return m.Credential(wire.Claim{Role: role, ClusterID: cid, Generation: gen, Shared: v.shared, Limit: v.limit,
		LeaseMs: v.leaseMs, ID: id, ClientKey: v.key(), Name: v.name}), gen, true
}

// appendStateV3 appends the answer of a version 3 session with a
// credential in state st: with its credential when fresh (a grant, the
// answer to an ACQUIRE or a resume) or when a generation began since the
// last one it was sent, else the frames of version 1. mu and c.wmu must
// be held.
func (c *session) appendStateV3(st locktable.State, fresh bool) {
	if st.Held {
		a := wire.Acquired{Token: st.Token}
		if cred, gen, ok := c.credentialIf(fresh, true, st.Token); ok {
			a.WithCredential, a.Generation, a.Credential = true, gen, cred
		}
		c.out = wire.AppendAcquiredV3(c.out, a)
		return
	}
	w := wire.Waiting{Position: uint32(st.Position)}
	if v := c.v3; v.ticket != 0 {
		if cred, gen, ok := c.credentialIf(fresh, false, v.ticket); ok {
			w.WithTicket, w.Ticket, w.Generation, w.Credential = true, v.ticket, gen, cred
		}
	}
	c.out = wire.AppendWaitingV3(c.out, w)
}

// credentialIf is the credential to send with an answer: always when
// fresh, else only when a generation began since the last one sent. mu
// must be held.
func (c *session) credentialIf(fresh, held bool, id uint64) (wire.Credential, uint32, bool) {
	s, v := c.srv, c.v3
	if !fresh {
		if _, _, gen, ok := s.cfg.Resume.Credentials(); !ok || gen == v.gen {
			return wire.Credential{}, 0, false
		}
	}
	cred, gen, ok := s.credential(v, held, id)
	if ok {
		v.gen = gen
	}
	return cred, gen, ok
}

// resumeClaim takes the resume req, a version 3 ACQUIRE with RESUME, on
// the session's own reader (never the idle poller's shard: it may wait for
// the bound's commit or for the server to serve), and queues its answer:
// the checks of "How the server checks a version 3 ACQUIRE", then the
// first row of "What the server answers to a resume" that applies.
func (c *session) resumeClaim(req wire.Acquire) (reason EndReason, msg string, ok bool) {
	s := c.srv
	c.version = wire.Version3 // its ends are those of version 3 (a reset where no ERROR can be written)
	lease := time.Duration(req.LeaseMs) * time.Millisecond
	held := req.Held()
	id := req.Resume.ID
	// Rows 14 to 17: the access rules with this connection's identities,
	// the lease cap, a server that stops or does not serve (yet).
	if reason, msg, ok := c.authorize(req.Name, Kind{Shared: req.Shared(), Limit: int(req.Limit)}); !ok {
		s.m.resumeRefused("unauthorized")
		return reason, msg, false
	}
	if s.cfg.MaxLease > 0 && lease > s.cfg.MaxLease {
		return ReasonBadRequest, fmt.Sprintf("lease %v is longer than this server's maximum of %v (-max-lease)", lease, s.cfg.MaxLease), false
	}
	if reason, msg, ok := s.awaitResumes(time.Now().Add(s.cfg.IOTimeout)); !ok {
		return reason, msg, false
	}
	// Row 1: no credential is given or checked here.
	if !s.resumable(lease) {
		s.m.resumeRefused("no_credentials")
		return ReasonResumeRefused, "this server gives no credential to such a claim", false
	}
	// Row 2: the credential, before anything about the table is looked
	// at, so that a refusal tells a forger nothing of the claims here.
	m, cid, gen, _ := s.cfg.Resume.Credentials()
	v := &v3claim{name: req.Name, leaseMs: req.LeaseMs, limit: req.Limit, shared: req.Shared(), clientKey: clientKeyOf(c.conn),
		resumedFrom: id >> epochShift}
	role := wire.RoleWaiter
	if held {
		role = wire.RoleHolder
	}
	if !m.Verify(wire.Claim{Role: role, ClusterID: cid, Generation: req.Resume.Generation, Shared: v.shared, Limit: v.limit,
		LeaseMs: v.leaseMs, ID: id, ClientKey: v.key(), Name: v.name}, req.Resume.Credential) && !noCredentialCheck() {
		s.m.resumeRefused("bad_credential")
		return ReasonBadCredential, "", false
	}
	// Row 3: a generation that is neither the current one nor the one
	// before.
	if g := req.Resume.Generation; g != gen && g+1 != gen {
		s.m.resumeRefused("generation")
		return ReasonResumeRefused, "generation too old", false
	}
	// A claim like any other for the lease bound: durable before the claim
	// enters the table.
	if s.cfg.leaseNoter() != nil {
		if err := s.noteLease(lease); err != nil {
			if errors.Is(err, ErrNotLeader) {
				return ReasonNotLeader, s.leaderHint(), false
			}
			s.log.Error("cannot record the lease bound; resume refused", "lease", lease.String(), "err", err)
			return ReasonOverloaded, "cannot record lease " + lease.String() + " for crash recovery", false
		}
		s.leaseNoted(lease)
	}
	claim := locktable.Claim{
		Request: locktable.Request{Name: req.Name, Owner: req.Owner, Lease: lease, Shared: req.Shared(), Limit: int(req.Limit)},
		Attempt: uint32(req.Resume.Attempt),
	}
	if held {
		claim.Token = id
	} else {
		claim.Ticket = id
	}
	return c.resumeInTable(claim, v, held)
}

// epochShift is where a token's or a ticket's epoch starts.
const epochShift = 40

// resumeInTable is the part of a resume under the table's lock: rows 4 to
// 16 of the table of answers, and the move or the admission. Losers of a
// conflict are recorded, with mu released, before they are told SUPERSEDED
// and before the winner is answered.
func (c *session) resumeInTable(claim locktable.Claim, v *v3claim, held bool) (EndReason, string, bool) {
	s := c.srv
	var fx effects
	defer s.deliver(&fx) // after the unlock
	s.mu.Lock()
	now := s.now()
	if c.ended {
		s.mu.Unlock()
		return c.reason, "", false
	}
	if s.closing.Load() {
		s.mu.Unlock()
		return ReasonShutdown, "server shutting down", false
	}
	if !s.mayServeLocked(now) {
		s.mu.Unlock()
		return ReasonNotLeader, s.leaderHint(), false
	}
	id := claim.Token
	if !held {
		id = claim.Ticket
	}
	if !s.table.Holds(claim) {
		// Rows 10 and 11: an end the table cannot know (it starts anew
		// with each term), and a claim of a listed term that the list did
		// not hold.
		if kind, epoch, ok := s.cfg.Resume.Ended(claim.Name, held, id); ok {
			s.mu.Unlock()
			s.m.resumeRefused("recorded")
			switch {
			case kind == RecordSuperseded && epoch == s.epoch:
				return ReasonSuperseded, "", false
			case kind == RecordReleased && epoch == s.epoch:
				return ReasonForceReleased, "lock " + strconv.Quote(claim.Name) + " force-released by an operator", false
			case kind == RecordKicked && epoch == s.epoch:
				return ReasonKicked, "removed from the queue of " + strconv.Quote(claim.Name) + " by an operator", false
			}
			return ReasonResumeRefused, "claim ended: " + kind.String(), false
		}
		if s.listEpoch != 0 && id>>epochShift == s.listEpoch {
			s.mu.Unlock()
			s.m.resumeRefused("not_listed")
			return ReasonResumeRefused, "claim ended before the handover", false
		}
	}
	st, refusal, exits, err := s.table.Resume(now, c.id, claim, s.exits[:0])
	if refusal != locktable.NotRefused && err == nil {
		st, refusal, exits = s.mutatedResumeLocked(now, c.id, claim, st, refusal, exits)
	}
	if err != nil { // a bug: the claim was checked
		s.settleLocked(now, exits, &fx)
		s.mu.Unlock()
		return ReasonProtocolError, err.Error(), false
	}
	// The losers of a conflict leave the table with this call: they are
	// confirmed no more from here on, and told once their ends are recorded.
	var losers []locktable.Exit
	how := "grace"
	var from locktable.SessionID // the session the claim went on from
	kept := exits[:0]
	for _, e := range exits {
		switch e.Cause {
		case locktable.CauseSuperseded:
			losers = append(losers, e)
			continue
		case locktable.CauseMoved:
			how, from = "move", e.Session.ID
			if e.Session.Pending {
				how = "pending"
			}
		}
		kept = append(kept, e)
	}
	if refusal != locktable.NotRefused {
		s.settleLocked(now, kept, &fx)
		s.mu.Unlock()
		return s.resumeRefusal(refusal, claim, held, id)
	}
	c.inTable = true
	c.v3 = v
	if !st.Held {
		v.ticket = claim.Ticket
	}
	s.sessions[c.id] = c
	s.settleLocked(now, kept, &fx)
	switch how {
	case "pending", "grace": // a move from a live session keeps its count
		if st.Held {
			s.m.holding.Inc()
		} else {
			s.m.waiting.Inc()
		}
	}
	s.m.resumed(held && st.Held, how)
	var loserSessions []*session
	for _, e := range losers {
		loserSessions = append(loserSessions, s.supersedeLocked(e))
	}
	if len(losers) > 0 {
		// Recorded before anything is told: the winner's answer and the
		// losers' SUPERSEDED.
		s.mu.Unlock()
		s.recordSuperseded(losers)
		s.mu.Lock()
		now = s.now()
		for _, l := range loserSessions {
			if l != nil {
				s.endOneLocked(now, l, ReasonSuperseded, "", &fx)
			}
		}
		if c.ended {
			s.mu.Unlock()
			return c.reason, "", false
		}
		if st2, ok := s.table.Session(now, c.id); ok {
			st = locktable.State{Held: st2.Held, Token: st2.Token, Position: st2.Position}
		}
	}
	if in, ok := s.table.Session(now, c.id); ok {
		s.eventReplacingLocked(EventResumed, in, from)
	}
	c.wmu.Lock()
	c.appendStateV3(st, true)
	c.wmu.Unlock()
	s.wakeReaperLocked(now.Add(claim.Lease))
	s.checkServedLocked()
	s.mu.Unlock()
	return 0, "", true
}

// resumeRefusal maps the table's refusal of a resume to its answer; a
// conflict the resume itself lost is recorded first.
func (s *Server) resumeRefusal(r locktable.Refusal, claim locktable.Claim, held bool, id uint64) (EndReason, string, bool) {
	switch r {
	case locktable.RefusedAttempt:
		s.m.resumeRefused("attempt")
		return ReasonMoved, "", false
	case locktable.RefusedRevoked:
		s.m.resumeRefused("revoked")
		return ReasonForceReleased, "lock " + strconv.Quote(claim.Name) + " force-released by an operator", false
	case locktable.RefusedSuperseded:
		s.m.resumeRefused("superseded")
		s.record([]EndRecord{{Kind: RecordSuperseded, Name: claim.Name, Held: held, ID: id, Epoch: s.epoch}})
		return ReasonSuperseded, "", false
	case locktable.RefusedSessions:
		s.m.resumeRefused("sessions")
		return ReasonOverloaded, fmt.Sprintf("session limit of %d reached", s.cfg.MaxSessions), false
	case locktable.RefusedWaiters:
		s.m.resumeRefused("waiters")
		return ReasonOverloaded, fmt.Sprintf("lock %q has the limit of %d waiters", claim.Name, s.cfg.MaxWaitersPerLock), false
	case locktable.RefusedFrozen:
		s.m.resumeRefused("frozen")
		return ReasonResumeRefused, "claim is being ended", false
	case locktable.RefusedLimit:
		s.m.resumeRefused("limit")
		return ReasonResumeRefused, "claim's limit disagrees with the name's holders", false
	}
	s.m.resumeRefused("ended")
	return ReasonResumeRefused, "claim ended", false
}

// supersedeLocked takes the session of e, a claim that lost a conflict and
// left the table, out of the server's books: it is confirmed no more, and
// is told SUPERSEDED once the end is recorded. It returns the session, nil
// if the claim had none (a pending one). mu must be held.
func (s *Server) supersedeLocked(e locktable.Exit) *session {
	if e.Session.Pending {
		s.m.pending.Dec()
		delete(s.pendingIDs, e.Session.ID)
	} else if e.Session.Held {
		s.m.holding.Dec()
	} else {
		s.m.waiting.Dec()
	}
	s.eventLocked(EventSuperseded, e.Session)
	c := s.sessions[e.Session.ID]
	delete(s.sessions, e.Session.ID)
	if c != nil {
		c.inTable = false
	}
	return c
}

// recordSuperseded records the ends of the claims of exits, losers of a
// conflict. A failed record is logged: the losers are told SUPERSEDED
// anyway (each loser is a claim already past its own end, and its client
// stops when told), and the winner holds; only a crash before the loser is
// told could let the loser come back without the record.
func (s *Server) recordSuperseded(exits []locktable.Exit) {
	recs := make([]EndRecord, 0, len(exits))
	for _, e := range exits {
		r := EndRecord{Kind: RecordSuperseded, Name: e.Lock, Held: e.Session.Held, ID: e.Session.Token, Epoch: s.epoch}
		if !e.Session.Held {
			r.ID = e.Session.Ticket
		}
		recs = append(recs, r)
	}
	s.record(recs)
}

// record makes recs durable, logging a failure; see recordSuperseded.
func (s *Server) record(recs []EndRecord) bool {
	if err := s.cfg.Resume.Record(recs); err != nil {
		s.log.Error("cannot record the end of a claim of version 3: a crash before its client is told could let it come back", "claims", len(recs), "err", err)
		return false
	}
	s.m.recorded.Add(float64(len(recs)))
	return true
}

// awaitResumes waits, for a resume, until the server may answer it: it
// serves and its initial wait is over (Carried.HoldResumes), or it is the
// node about to serve (Replica.AboutToServe) and comes to serve before
// deadline. Otherwise it returns the refusal: SHUTDOWN, or NOT_LEADER.
func (s *Server) awaitResumes(deadline time.Time) (EndReason, string, bool) {
	for {
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			return ReasonShutdown, "server shutting down", false
		}
		if s.handingOver {
			s.mu.Unlock()
			return ReasonNotLeader, s.leaderHint(), false
		}
		serving := s.serving.Load()
		wait := time.Until(deadline)
		if serving {
			left := s.resumesFrom.Sub(s.now())
			if left <= 0 {
				s.mu.Unlock()
				return 0, "", true
			}
			wait = min(wait, left)
		} else if s.cfg.Replica == nil || !s.cfg.Replica.AboutToServe() {
			s.mu.Unlock()
			return ReasonNotLeader, s.leaderHint(), false
		}
		if wait <= 0 {
			s.mu.Unlock()
			return ReasonNotLeader, s.leaderHint(), false
		}
		if s.termWake == nil {
			s.termWake = make(chan struct{})
		}
		wake := s.termWake
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		case <-s.done:
		}
		t.Stop()
	}
}

// wakeTermLocked wakes the resumes that wait for the server to serve
// (awaitResumes). mu must be held.
func (s *Server) wakeTermLocked() {
	if s.termWake != nil {
		close(s.termWake)
		s.termWake = nil
	}
}

// mutatedResumeLocked is the answer of a faultinject build with a knob of
// the resume's rules switched off (mutations_faultinject.go), so that the
// fault harness can show its checker catches what the rule prevents; in
// any other build it is the table's answer unchanged. mu must be held.
func (s *Server) mutatedResumeLocked(now time.Time, id locktable.SessionID, claim locktable.Claim, st locktable.State,
	refusal locktable.Refusal, exits []locktable.Exit) (locktable.State, locktable.Refusal, []locktable.Exit) {
	cid := claim.Token
	if cid == 0 {
		cid = claim.Ticket
	}
	switch {
	case refusal == locktable.RefusedResume && resumeAfterGrace() && cid>>epochShift < s.epoch && !s.table.Holds(claim):
		// Taken back after the grace: entered pending, then moved.
		s.nextID++
		pending := claim
		pending.Attempt = 0
		r, more, err := s.table.AddPending(now, s.nextID, pending, now.Add(claim.Lease), exits)
		if err != nil || r != locktable.NotRefused {
			return st, refusal, more
		}
		st2, r2, more2, err := s.table.Resume(now, id, claim, more)
		if err != nil {
			return st, refusal, more2
		}
		return st2, r2, more2
	case refusal == locktable.RefusedSuperseded && lowerTokenWins() && claim.Token != 0:
		// The holders above it are ended for it.
		holders, _ := s.table.HolderPage(now, claim.Name, 0, 0, math.MaxInt32)
		for _, h := range holders {
			if h.Token > claim.Token {
				exits, _ = s.table.ForceReleaseSession(now, h.ID, exits)
			}
		}
		st2, r2, more2, err := s.table.Resume(now, id, claim, exits)
		if err != nil {
			return st, refusal, more2
		}
		return st2, r2, more2
	}
	return st, refusal, exits
}
