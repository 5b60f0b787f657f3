package server

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/locktable"
)

// acquire enters the session in the table and queues its answer. With
// mayWait false (the idle poller's shard) it does nothing and reports
// wouldWait when noting the lease would wait for a disk write or a Raft
// round: the caller then hands the ACQUIRE to a reader goroutine.
func (c *session) acquire(req wire.Acquire, mayWait bool) (reason EndReason, msg string, ok, wouldWait bool) {
	s := c.srv
	now := s.now()
	lease := time.Duration(req.LeaseMs) * time.Millisecond
	if reason, msg, ok := c.authorize(req.Name, Kind{Shared: req.Shared(), Limit: int(req.Limit)}); !ok { // access rules (security.go)
		return reason, msg, false, false
	}
	if s.cfg.MaxLease > 0 && lease > s.cfg.MaxLease {
		return ReasonBadRequest, fmt.Sprintf("lease %v is longer than this server's maximum of %v (-max-lease)", lease, s.cfg.MaxLease), false, false
	}
	// Before the table, outside mu: a lease that grows the recorded bound
	// waits for its fsync (or its Raft commit), and must be durable before
	// any grant with it.
	if noter := s.cfg.leaseNoter(); noter != nil && !s.closing.Load() {
		var err error
		switch {
		case mayWait:
			err = s.noteLease(lease) // with the server's own descriptors if none is free (fdreserve.go)
		case s.cfg.Replica != nil:
			var done bool
			if done, err = s.cfg.Replica.TryNoteLease(lease); !done {
				return 0, "", false, true
			}
		case int64(lease) > s.noted.Load():
			return 0, "", false, true
		default:
			err = noter.NoteLease(lease) // no longer than one noted: no wait
		}
		if err != nil {
			if errors.Is(err, ErrNotLeader) {
				return ReasonNotLeader, s.leaderHint(), false, false
			}
			s.log.Error("cannot record the lease bound; session refused", "lease", lease.String(), "err", err)
			return ReasonOverloaded, "cannot record lease " + lease.String() + " for crash recovery", false, false
		}
		s.leaseNoted(lease)
	}
	var fx effects
	defer s.deliver(&fx) // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.ended {
		return c.reason, "", false, false
	}
	if s.closing.Load() {
		return ReasonShutdown, "server shutting down", false, false
	}
	// An answer confirms (and may grant): a leader that may no longer do
	// either ends every session, c with them.
	if !s.mayServeLocked(now) {
		return ReasonNotLeader, s.leaderHint(), false, false
	}
	c.version = req.Version
	// A version 1 claim, and a version 2 one without SHARED, is exclusive.
	shared := req.Shared()
	st, refusal, exits, err := s.table.Acquire(now, c.id, locktable.Request{
		Name: req.Name, Owner: req.Owner, Lease: lease, NoWait: req.NoWait(),
		Shared: shared, Limit: int(req.Limit),
	}, s.exits[:0])
	s.settleLocked(now, exits, &fx) // overdue sessions, expired on the way
	// An error is a bug: ids are unique, and the lease and limit were checked.
	if err != nil {
		return ReasonProtocolError, err.Error(), false, false
	}
	switch refusal {
	case locktable.RefusedLimit:
		limit, _ := s.table.Limit(req.Name)
		return ReasonLimitMismatch, strconv.Itoa(limit), false, false
	case locktable.RefusedBusy:
		return ReasonBusy, s.busyMessageLocked(req.Name, shared), false, false
	case locktable.RefusedSessions:
		s.m.refusedSess.Inc()
		return ReasonOverloaded, fmt.Sprintf("session limit of %d reached", s.cfg.MaxSessions), false, false
	case locktable.RefusedGrace:
		until, _ := s.table.GraceUntil()
		if s.cfg.Replica != nil {
			return ReasonBusy, fmt.Sprintf("failover grace: no lock is granted for %v more", max(until.Sub(now), 0).Round(time.Millisecond)), false, false
		}
		left := max(until.Sub(now), 0)
		return ReasonOverloaded, fmt.Sprintf("crash-recovery grace period: no lock is granted for %v more (until %s); retry after it",
			left.Round(time.Millisecond), time.Now().Add(left).UTC().Format(time.RFC3339Nano)), false, false
	case locktable.RefusedWaiters:
		s.m.refusedWaiters.Inc()
		return ReasonOverloaded, fmt.Sprintf("lock %q has the limit of %d waiters", req.Name, s.cfg.MaxWaitersPerLock), false, false
	}
	c.inTable = true
	s.sessions[c.id] = c
	if req.Version == wire.Version3 {
		c.v3 = s.newV3Locked(now, c, req, st)
	}
	if st.Held {
		s.m.holding.Inc()
		s.m.grantImmediate.Inc()
		s.m.claimGrant(shared)
		s.m.series(req.Name).wait.Observe(0)
	} else {
		s.m.waiting.Inc()
	}
	s.m.locks.Set(float64(s.table.Locks()))
	if in, ok := s.table.Session(now, c.id); ok {
		typ := EventQueued
		if st.Held {
			typ = EventGranted
		}
		s.eventLocked(typ, in)
	}
	if c.v3 != nil {
		c.wmu.Lock()
		c.appendStateV3(st, true)
		c.wmu.Unlock()
	} else {
		c.queueState(st)
	}
	s.wakeReaperLocked(now.Add(lease))
	return 0, "", true, false
}

// busyMessageLocked says why a NOWAIT claim on name may not hold at once.
// An exclusive claim's is version 1's, byte for byte. mu must be held.
func (s *Server) busyMessageLocked(name string, shared bool) string {
	if !shared {
		return fmt.Sprintf("lock %q is held", name)
	}
	holders, exclusive, waiters := s.table.Occupancy(name)
	limit, _ := s.table.Limit(name)
	switch {
	case exclusive:
		return fmt.Sprintf("lock %q is held by an exclusive claim", name)
	case waiters > 0:
		return fmt.Sprintf("lock %q has %d waiting, who go first", name, waiters)
	}
	return fmt.Sprintf("lock %q has no free slot: %d of %d held", name, holders, limit)
}
