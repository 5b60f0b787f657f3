package server

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/locktable"
)

// effects collects what the sessions changed while mu was held are owed,
// so that it is done after mu is released (see deliver).
type effects struct {
	// flush are the promoted sessions whose push is still queued.
	flush []*session
	// ended are the sessions ended, to be taken from the idle poller and
	// given their ERROR.
	ended []*session
	// pushed counts the pushes written under mu (see pushesUnderMu).
	pushed int
	// self is the session whose own reader (or the poller's shard, for it)
	// is ending it: that caller delivers its end itself.
	self *session
}

// pushesUnderMu is how many promotion pushes one hold of mu writes at once
// (without waiting, when the socket takes them): a handover's push, which
// the new holder waits for, goes out before the rest of the release's
// bookkeeping, and a mass promotion's pushes wait for mu's release.
const pushesUnderMu = 4

// deliver does what fx collected: the pushes first (the handovers), each
// written without waiting, then the ended sessions: a parked one is taken
// from the idle poller and gets a reader, which writes its ERROR and
// closes it; another gets a flusher for its ERROR (its reader is woken by
// it). A push the socket cannot take at once gets a flusher too. Callers
// hold mu only when they end every session (Shutdown, a lost term);
// others call it once mu is released, so that a release of many sessions
// holds up nobody for their system calls.
func (s *Server) deliver(fx *effects) {
	var readers, writers []*session
	for _, p := range fx.flush {
		if !p.poll.Bound() || !p.writeNow() {
			writers = append(writers, p)
		}
	}
	for _, c := range fx.ended {
		switch {
		case s.poller != nil && s.poller.unpark(c):
			readers = append(readers, c)
		case c.reason.code() != 0:
			writers = append(writers, c)
		}
	}
	if len(readers)+len(writers) > 0 {
		s.startMu.Lock()
		for _, c := range readers {
			if !s.goLocked(c.resume) {
				c.conn.Close() // stopped: Shutdown closes what is left
			}
		}
		for _, c := range writers {
			s.goLocked(c.flush)
		}
		s.startMu.Unlock()
	}
	clear(fx.flush)
	clear(fx.ended)
	fx.flush, fx.ended, fx.pushed = fx.flush[:0], fx.ended[:0], 0
}

// endLocked ends session c for reason, for a caller that ends every
// session (Shutdown, a lost term) or cannot block on sockets: c leaves the
// table (promoting the next waiter if it held the lock) and gets an ERROR
// if the reason has a code, and the writes happen in new goroutines. A
// session's own reader ends it with endOneLocked and writes itself (see
// session.end). mu must be held.
func (s *Server) endLocked(now time.Time, c *session, reason EndReason, msg string) {
	var fx effects
	s.endOneLocked(now, c, reason, msg, &fx)
	s.deliver(&fx)
}

func (s *Server) endOneLocked(now time.Time, c *session, reason EndReason, msg string, fx *effects) {
	if c.inTable && !c.ended {
		// Leaving the table may promote a waiter: a leader that may no
		// longer grant ends every session first (c among them).
		s.mayServeLocked(now)
	}
	if c.ended {
		return
	}
	c.ended = true
	c.reason = reason
	c.closing.Store(true)
	delete(s.conns, c)
	s.m.ended[reason].Inc()
	// The release first: a waiter's push is the handover, and goes out
	// before the rest of this bookkeeping (see promoteLocked).
	if c.inTable && c.v3 != nil && reason.broken() && s.detachLocked(now, c) {
		c.inTable = false
	}
	if c.inTable {
		c.inTable = false
		// Only this call releases from the table while its exits are in use
		// (ending an exit's session never releases again), so one scratch
		// slice serves every release.
		exits, _ := s.table.Release(now, c.id, s.releaseExits[:0])
		s.applyExitsLocked(now, exits, reason, fx)
		clear(exits)
		s.releaseExits = exits[:0]
	}
	if c != fx.self {
		fx.ended = append(fx.ended, c) // see deliver
	}
	if code := reason.code(); code != 0 {
		c.queueError(code, msg)
		if code.Class() == wire.ClassClient {
			if ctr := s.m.protocolErrors[code]; ctr != nil {
				ctr.Inc()
			}
		}
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("session ended", "session", uint64(c.id), "remote", c.remote, "reason", reason.String())
	}
}

// applyExitsLocked brings the sessions of the table's exits up to date:
// counts them, ends those the table ended (expiry, force-release, kick),
// and queues the promotion push for each new holder, in queue order. cause
// is the reason of the session the caller itself is ending (0 if none). mu
// must be held.
func (s *Server) applyExitsLocked(now time.Time, exits []locktable.Exit, cause EndReason, fx *effects) {
	for _, e := range exits {
		switch e.Cause {
		case locktable.CauseMoved:
			s.movedLocked(now, e, fx)
			continue
		case locktable.CauseRevoked:
			// A pending claim an operator released: it stays, with its
			// slot, until its time runs out.
			s.eventLocked(EventForceReleased, e.Session)
			continue
		}
		if e.Cause == locktable.CauseGraceEnded || e.Cause == locktable.CauseQueueMoved {
			// Nobody left: the grants go on with the handover that began
			// them (none for the grace's end).
			h, ok := s.moving[e.Lock]
			if !ok {
				h = handover{at: now}
			}
			for _, g := range e.Promoted {
				s.promoteLocked(now, g, h, fx)
			}
			for _, g := range e.Promoted {
				s.grantEventLocked(now, g)
			}
			s.stillMovingLocked(e, h)
			continue
		}
		// Counts before the pushes (the metrics are read without mu: they
		// never show the new holders beside the old one), the events after
		// them (read under mu, so their order is unchanged).
		switch {
		case e.Session.Pending:
			s.m.pending.Dec()
			if s.pendingIDs[e.Session.ID] {
				s.m.pendingLost.Inc() // its client never came back
			}
			delete(s.pendingIDs, e.Session.ID)
		case e.Session.Held:
			s.m.holding.Dec()
			s.m.series(e.Session.Name).hold.Observe(e.Session.Since.Seconds())
		default:
			s.m.waiting.Dec()
		}
		if len(s.detached) > 0 {
			delete(s.detached, e.Session.ID)
		}
		reason := cause
		switch e.Cause {
		case locktable.CauseExpired:
			reason = ReasonLeaseExpired
			if e.Session.Held {
				s.m.expiredHolding.Inc()
			} else {
				s.m.expiredWaiting.Inc()
			}
		case locktable.CauseForceReleased:
			reason = ReasonForceReleased
		case locktable.CauseKicked:
			reason = ReasonKicked
		case locktable.CauseSuperseded:
			reason = ReasonSuperseded
		case locktable.CauseOverloaded, locktable.CauseLimitOverruled:
			reason = ReasonOverloaded
		}
		// Every push of one exit is a grant at now: the caller asked
		// mayServeLocked(now) before the table call that made them.
		h := handover{reason: reason, at: now}
		for _, g := range e.Promoted {
			s.promoteLocked(now, g, h, fx)
		}
		c := s.sessions[e.Session.ID]
		if !s.listedEndLocked(e, c, cause) {
			s.exitEventLocked(e)
		}
		for _, g := range e.Promoted {
			s.grantEventLocked(now, g)
		}
		s.stillMovingLocked(e, h)
		delete(s.sessions, e.Session.ID)
		if c != nil {
			c.inTable = false
			if !c.ended {
				msg := reasonMessage(reason, e.Session)
				s.endOneLocked(now, c, reason, msg, fx)
			}
		}
	}
	s.m.locks.Set(float64(s.table.Locks()))
}

// listedEndLocked reports whether exit e is the end of a claim of version
// 3 that a planned stop or handover listed, on its session c ended by the
// stop (cause): the claim goes on at the next start or leader, so its end
// here is no release, and the event stream must not say it was. mu must
// be held.
func (s *Server) listedEndLocked(e locktable.Exit, c *session, cause EndReason) bool {
	return s.handingOver && e.Cause == locktable.CauseReleased && c != nil && c.v3 != nil &&
		(cause == ReasonShutdown || cause == ReasonNotLeader)
}

// handover is how a promotion began: how the session whose end made room
// ended (0 when there was none: the end of the grace period), and when.
type handover struct {
	reason EndReason
	at     time.Time
}

// stillMovingLocked keeps h for the lock of exit e while the table leaves
// its queue moving, and wakes the reaper to move it on; the first
// handover of a promotion in steps stays its handover. mu must be held.
func (s *Server) stillMovingLocked(e locktable.Exit, h handover) {
	if !e.Moving {
		if len(s.moving) > 0 {
			delete(s.moving, e.Lock)
		}
		return
	}
	if _, ok := s.moving[e.Lock]; !ok {
		s.moving[e.Lock] = h
	}
	select {
	case s.reaperWake <- struct{}{}:
	default:
	}
}

// promoteLocked counts the grant g of a waiter and queues its ACQUIRED
// push; h is the handover that made room. mu must be held.
//
// The push is the handover, so the first few of a hold (pushesUnderMu)
// are written here, under mu and before the caller's events and its
// session's end, when the socket takes them at once (it nearly always
// does): the new holder waits for nothing else. The caller's effects write
// the others once mu is released.
func (s *Server) promoteLocked(now time.Time, g locktable.Grant, h handover, fx *effects) {
	s.m.waiting.Dec()
	s.m.holding.Inc()
	s.m.series(g.Name).wait.Observe(g.Waited.Seconds())
	p := s.sessions[g.ID]
	if p == nil || p.ended || s.closing.Load() || !s.serving.Load() {
		return // ending too (as in shutdown): it must not hear ACQUIRED
	}
	s.m.grantPromotion.Inc()
	s.m.claimGrant(g.Shared)
	if ctr := s.m.handovers[h.reason]; ctr != nil {
		ctr.Inc()
	}
	p.queueAcquired(true, g.Token, h.at)
	if fx.pushed < pushesUnderMu && p.poll.Bound() && p.writeNow() {
		fx.pushed++
		return
	}
	fx.flush = append(fx.flush, p)
}

// movedLocked applies exit e of a claim that went on on another session
// (a resume): its old connection, if it has one, is ended with MOVED and
// releases nothing; a pending claim is counted back. The grants e made (a
// pending waiter at the head that came back may let the queue move) are
// pushed. mu must be held.
func (s *Server) movedLocked(now time.Time, e locktable.Exit, fx *effects) {
	if e.Session.Pending {
		s.m.pending.Dec()
		delete(s.pendingIDs, e.Session.ID)
	}
	h := handover{at: now}
	for _, g := range e.Promoted {
		s.promoteLocked(now, g, h, fx)
	}
	for _, g := range e.Promoted {
		s.grantEventLocked(now, g)
	}
	s.stillMovingLocked(e, h)
	c := s.sessions[e.Session.ID]
	delete(s.sessions, e.Session.ID)
	if c != nil {
		c.inTable = false
		if !c.ended {
			s.endOneLocked(now, c, ReasonMoved, "", fx)
		}
	}
}

// detachLocked keeps holder c of version 3, ended for a broken connection,
// in the table until its lease runs out: frozen (confirmed no more, never
// moved), with no connection, so that nothing is granted over it while
// its client, which may not have learnt of the end, may still believe. It
// reports false for a waiter, which leaves at once. mu must be held.
func (s *Server) detachLocked(now time.Time, c *session) bool {
	in, ok := s.table.Session(now, c.id)
	if !ok || !in.Held || in.Pending {
		return false
	}
	s.table.Freeze(c.id)
	delete(s.sessions, c.id)
	if s.detached == nil {
		s.detached = make(map[locktable.SessionID]time.Duration)
	}
	s.detached[c.id] = in.Lease
	return true
}

func reasonMessage(r EndReason, in locktable.Info) string {
	switch r {
	case ReasonLeaseExpired:
		return "no frame for the lease of " + in.Lease.String()
	case ReasonForceReleased:
		return "lock " + strconv.Quote(in.Name) + " force-released by an operator"
	case ReasonKicked:
		return "removed from the queue of " + strconv.Quote(in.Name) + " by an operator"
	}
	return r.String()
}
