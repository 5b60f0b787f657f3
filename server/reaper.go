package server

import (
	"time"

	"github.com/batonlock/baton/locktable"
)

// timerSlack is how late a Go timer may fire: the runtime sleeps in
// epoll_wait, whose timeout is in whole milliseconds, so a timer lands up to
// a millisecond after its time. The reaper arms its timer this much early
// and sleeps the rest with sleepPrecisely, so that a lease ends within
// microseconds of its deadline, not up to a millisecond after it.
const timerSlack = time.Millisecond

// reap expires silent sessions, and moves on the queues the table left
// moving (see bulkStep), a step per hold of mu. It sleeps until the
// table's next deadline; a new session with an earlier deadline wakes it
// (heartbeats only move deadlines later, so they never need to), and so
// does a queue left moving.
func (s *Server) reap() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var fx effects
		s.mu.Lock()
		now := s.now()
		// Every push checks the leader lease first: an expiry promotes a
		// waiter, a queue moves on, the grace's end grants. A server that
		// may not serve (it just failed closed, or leads no term) has
		// ended every session with its term, and has nothing to wait for
		// until BeginTerm wakes the reaper with a new table.
		var (
			moving, ok bool
			next       time.Time
		)
		if s.mayServeLocked(now) {
			s.settleLocked(now, s.table.Expire(now, s.exits[:0]), &fx)
			if s.table.Moving() {
				s.settleLocked(now, s.table.Promote(now, s.exits[:0]), &fx)
			}
			s.checkServedLocked()
			moving = s.table.Moving()
			next, ok = s.table.NextDeadline()
		}
		if ok {
			s.armedFor = next
		} else {
			s.armedFor = time.Time{}
		}
		s.mu.Unlock()
		s.deliver(&fx)
		if moving {
			continue // the next step, once the others have had mu
		}

		if ok {
			// The timer counts the monotonic clock, which stops during a
			// suspend: it can fire late, never early. What is overdue after
			// a suspend ends at the first look, whoever looks (a frame of
			// the session, an ACQUIRE, this loop).
			wait := next.Sub(s.now())
			if wait <= timerSlack {
				// Closer than a timer's resolution: sleep the rest with a
				// precise clock, then expire.
				sleepPrecisely(wait)
				continue
			}
			timer.Reset(wait - timerSlack)
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C:
		case <-s.reaperWake:
		case <-s.done:
			return
		}
	}
}

// settleLocked applies the exits of a table call made for no session's own
// end (an expiry, an operator's action, the overdue sessions an ACQUIRE
// cleared) into fx, which the caller delivers. exits is the s.exits
// scratch; it is cleared and kept for the next call. mu must be held.
func (s *Server) settleLocked(now time.Time, exits []locktable.Exit, fx *effects) {
	s.applyExitsLocked(now, exits, 0, fx)
	clear(exits)
	s.exits = exits[:0]
}

// wakeReaperLocked makes the reaper look again if deadline is earlier than
// the one it sleeps for. mu must be held.
func (s *Server) wakeReaperLocked(deadline time.Time) {
	if s.armedFor.IsZero() || deadline.Before(s.armedFor) {
		s.armedFor = deadline
		select {
		case s.reaperWake <- struct{}{}:
		default:
		}
	}
}
