package server

import (
	"errors"
	"time"
)

// ErrNotLeader is what Replica.NoteLease returns when this node of a cluster
// no longer leads: the session is refused with ERROR NOT_LEADER.
var ErrNotLeader = errors.New("this node is not the leader")

// BeginTerm makes a replicated server serve sessions, with a fresh lock
// table that grants nothing for grace (the failover grace, on the server's
// clock; 0 for none). Tokens come from Config.NextToken, which the caller
// has moved to the new epoch before this call.
//
// carried is what the term takes over (protocol version 3): the claims of
// earlier terms its grace admits, a planned handover's list, how long it
// holds resumes before it answers them.
func (s *Server) BeginTerm(grace time.Duration, carried Carried) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return
	}
	now := s.now()
	var noGrantBefore time.Time
	if grace > 0 {
		noGrantBefore = now.Add(grace)
	}
	// EndTerm left the table empty; a new one carries the new grace.
	clear(s.moving)
	s.m.locks.Set(0)
	s.startTermLocked(now, noGrantBefore, carried)
	s.serving.Store(true)
	s.wakeTermLocked()
	if !noGrantBefore.IsZero() {
		s.wakeReaperLocked(noGrantBefore)
	}
}

// EndTerm stops a replicated server from serving: every open session,
// holder, waiter or not yet in the table, is ended with reason
// (ReasonNotLeader on a lost leadership, ReasonShutdown on a planned
// handover) and msg, and no waiter is promoted on the way. Until the next
// BeginTerm every ACQUIRE is answered ERROR NOT_LEADER.
//
// It returns the number of holders ended and a channel closed once every
// one of them has been seen to close its connection (the drain of a
// planned handover); a holder that does not close within the linger time
// never closes it.
func (s *Server) EndTerm(reason EndReason, msg string) (holders int, allClosed <-chan struct{}) {
	s.mu.Lock()
	gone := s.endTermLocked(s.now(), reason, msg, true)
	s.mu.Unlock()
	done := make(chan struct{})
	if len(gone) == 0 {
		close(done)
		return 0, done
	}
	// Ends by the linger time at the latest. done is closed only when every
	// holder was seen to close: a drain that gives up says nothing, and the
	// caller's own wait runs out.
	go func() {
		for _, ch := range gone {
			select {
			case <-ch:
			case <-s.done:
				return
			case <-time.After(s.linger + time.Second):
				return
			}
		}
		close(done)
	}()
	return len(gone), done
}

// endTermLocked stops serving and ends every open session with reason and
// msg, promoting nobody; with watch, it returns a channel per holder that
// is closed when that holder's client is seen to close. mu must be held.
func (s *Server) endTermLocked(now time.Time, reason EndReason, msg string, watch bool) (gone []chan struct{}) {
	s.serving.Store(false) // before the ends: no promotion on the way out
	s.wakeTermLocked()
	var all []*session
	for c := range s.conns {
		all = append(all, c)
	}
	// The holders are picked before anything ends: ending one promotes
	// its waiter in the table (silently: serving is off).
	if watch {
		for _, c := range all {
			if c.inTable {
				if in, ok := s.table.Session(now, c.id); ok && in.Held {
					c.peerGone = make(chan struct{})
					gone = append(gone, c.peerGone)
				}
			}
		}
	}
	for _, c := range all {
		s.endLocked(now, c, reason, msg)
	}
	return gone
}

// mayServeLocked reports whether the server may grant and confirm at now,
// and fails closed when a replicated leader's lease has run out: it stops
// serving, ends every session with NOT_LEADER and tells Replica.TermLost.
// Every path that can confirm or grant asks it first, with the time it
// then uses. mu must be held.
func (s *Server) mayServeLocked(now time.Time) bool {
	if !s.serving.Load() || s.closing.Load() {
		return false
	}
	if s.cfg.Replica == nil || s.cfg.Replica.MayServe(now) {
		return true
	}
	s.log.Warn("leader lease ran out: no grant or confirmation until a new term; ending every session")
	s.endTermLocked(now, ReasonNotLeader, s.leaderHint(), false)
	if s.cfg.Replica != nil {
		s.cfg.Replica.TermLost()
	}
	return false
}

// Serving reports whether the server serves sessions (a replicated node
// between BeginTerm and EndTerm; a standalone server always).
func (s *Server) Serving() bool { return s.serving.Load() }

// MaxLease is the longest lease among the sessions in the table, 0 if none:
// what a leader's lease bound must still cover.
func (s *Server) MaxLease() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m time.Duration
	now := s.now()
	for id := range s.sessions {
		if in, ok := s.table.Session(now, id); ok && in.Lease > m {
			m = in.Lease
		}
	}
	// And the claims the table keeps without a session: pending ones of a
	// handover, holders waiting out their leases after a broken connection.
	_, pending := s.table.PendingClaims()
	m = max(m, pending)
	for _, lease := range s.detached {
		m = max(m, lease)
	}
	return m
}

// GraceRemaining is how long the table still grants nothing, 0 if not in a
// grace period.
func (s *Server) GraceRemaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.table.GraceUntil()
	if !ok {
		return 0
	}
	return max(until.Sub(s.now()), 0)
}

func (s *Server) leaderHint() string {
	hint := ""
	if s.cfg.Replica != nil {
		hint = s.cfg.Replica.LeaderHint()
	}
	if h := s.successorHint.Load(); hint == "" && h != nil && !s.serving.Load() {
		return *h // a handover under way: its successor, before Raft names it
	}
	return hint
}
