package server

import (
	"time"

	"github.com/batonlock/baton/locktable"
)

// What a term carries from the one before and hands to the next (protocol
// version 3): the pending claims of a planned handover's list, the claims
// of earlier terms a crash grace takes back, the list a planned handover
// takes at the moment it stops confirming, and the generations of
// credentials.

// startTermLocked gives the server a new table for a term that grants
// nothing before noGrantBefore (zero: no grace) and carries c in: the
// claims of its list enter as pending. mu must be held, or the server not
// yet shared.
func (s *Server) startTermLocked(now, noGrantBefore time.Time, c Carried) {
	resumeBelow := uint64(0)
	if !noGrantBefore.IsZero() {
		resumeBelow = c.ResumeBelow
	}
	s.table = newTable(s.cfg, noGrantBefore, resumeBelow)
	s.epoch, s.listEpoch, s.resumeBelow = c.Epoch, 0, resumeBelow
	s.resumesFrom = now.Add(c.HoldResumes)
	s.genAt = now
	s.handingOver, s.servedTold = false, false
	s.successorHint.Store(nil)
	s.pendingIDs, s.detached = nil, nil
	s.m.pending.Set(0)
	if c.List == nil || s.cfg.NextTicket == nil {
		return
	}
	s.listEpoch = c.List.Epoch
	s.pendingIDs = make(map[locktable.SessionID]bool, len(c.List.Claims))
	var bad int
	for i := range c.List.Claims {
		hc := &c.List.Claims[i]
		// A claim of this term or a later one, or with no time left, is
		// not one a handover could list: a corrupt list, which must not
		// reach the table (a grant would then meet a token not below it).
		if hc.Token>>epochShift >= c.Epoch || hc.Ticket>>epochShift >= c.Epoch || (hc.Token == 0 && hc.Ticket == 0) {
			bad++
			continue
		}
		if hc.Left <= 0 {
			continue
		}
		s.nextID++
		id := s.nextID
		claim := locktable.Claim{
			Request: locktable.Request{Name: hc.Name, Lease: hc.Lease, Shared: hc.Shared, Limit: int(hc.Limit)},
			Token:   hc.Token, Ticket: hc.Ticket, Attempt: uint32(hc.Attempt),
		}
		refusal, exits, err := s.table.AddPending(now, id, claim, now.Add(hc.Left), s.exits[:0])
		if err != nil || refusal != locktable.NotRefused {
			bad++
			clear(exits)
			continue
		}
		var fx effects
		s.settleLocked(now, exits, &fx) // nothing to deliver: no pending claim has a connection
		if hc.NoResume {
			s.table.Freeze(id)
		}
		if hc.Released && hc.Token != 0 {
			exits, _ := s.table.ForceReleaseSession(now, id, s.exits[:0])
			clear(exits)
		}
		s.pendingIDs[id] = !hc.NoResume
		s.m.pending.Inc()
	}
	if bad > 0 {
		s.log.Error("the handover list holds claims no table could have held; they are left out", "claims", bad, "list_epoch", c.List.Epoch, "epoch", c.Epoch)
	}
	if n := len(s.pendingIDs); n > 0 {
		_, longest := s.table.PendingClaims()
		s.log.Info("claims of a planned handover pending: each name grants once its own are back or their time is up",
			"claims", n, "longest_left", c.List.LongestLeft().String(), "longest_lease", longest.String())
		if next, ok := s.table.NextDeadline(); ok {
			s.wakeReaperLocked(next)
		}
	}
}

// unclosedHolder is a holder of version 1 or 2 (or of version 3 without a
// credential) that a planned handover told SHUTDOWN: listed, not to be
// resumed, unless it is seen to close.
type unclosedHolder struct {
	gone  chan struct{}
	claim HandoverClaim
}

// takeListLocked takes the planned handover's list at now, the moment
// confirmations stop: every claim of version 3 with a credential, holding
// or waiting, with its time left; the holders waiting out their leases
// after a broken connection and the pending claims of a list before, with
// theirs; and, to be listed only if they are not seen to close, the other
// holders (s.unclosed, each watched from now on). From here on nothing is
// confirmed: handingOver. mu must be held.
func (s *Server) takeListLocked(now time.Time) *HandoverList {
	s.handingOver = true
	l := &HandoverList{Epoch: s.epoch}
	if until, ok := s.table.GraceUntil(); ok {
		l.GraceLeft = max(until.Sub(now), 0)
		l.WaitLeft = max(s.resumesFrom.Sub(now), 0)
	}
	s.unclosed = nil
	for _, li := range s.table.Snapshot(now) {
		for _, in := range li.Holders {
			s.listLocked(l, li, in)
		}
		for _, in := range li.Waiters {
			s.listLocked(l, li, in)
		}
	}
	return l
}

// listLocked lists in, a claim of li, in l (or among s.unclosed). mu must
// be held.
func (s *Server) listLocked(l *HandoverList, li locktable.LockInfo, in locktable.Info) {
	left := in.Lease - in.Silent
	if left <= 0 {
		return // expired, and not yet reaped
	}
	hc := HandoverClaim{Name: in.Name, Shared: in.Shared, Limit: 1, Lease: in.Lease, Token: in.Token, Ticket: in.Ticket,
		Attempt: uint16(min(in.Attempt, 1<<16-1)), Left: left}
	if in.Shared {
		hc.Limit = uint16(li.Limit)
	}
	if !in.Held {
		hc.Token = 0
	}
	c := s.sessions[in.ID]
	switch {
	case in.Pending:
		hc.NoResume = !s.pendingIDs[in.ID]
		hc.Released = in.Revoked
	case s.detached[in.ID] != 0:
		hc.NoResume = true
	case c != nil && c.v3 != nil:
		if in.Frozen {
			if !in.Held {
				return // a kick under way: its place is not kept
			}
			hc.Released = true
		}
	case in.Held && c != nil:
		// Versions 1 and 2: listed if not seen to close (HandoverList).
		hc.NoResume = true
		c.peerGone = make(chan struct{})
		s.unclosed = append(s.unclosed, unclosedHolder{gone: c.peerGone, claim: hc})
		return
	default:
		return // a waiter of version 1 or 2: it takes a new place
	}
	if hc.Token == 0 && hc.Ticket == 0 {
		return
	}
	l.Claims = append(l.Claims, hc)
}

// HandoverList is the list of claims a planned stop handed on (Shutdown of
// a server with Config.Resume), to be called once Shutdown has returned:
// the claims of version 3 it counted when it stopped confirming, and the
// other holders it did not see close. Nil if Shutdown took none.
func (s *Server) HandoverList() *HandoverList {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.list == nil {
		return nil
	}
	for _, u := range s.unclosed {
		select {
		case <-u.gone:
		default:
			s.list.Claims = append(s.list.Claims, u.claim)
		}
	}
	s.unclosed = nil
	return s.list
}

// Served reports whether the term has served its grace whole: the grace
// is over and no claim of a handover's list is pending.
func (s *Server) Served() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.servedLocked()
}

func (s *Server) servedLocked() bool {
	if _, grace := s.table.GraceUntil(); grace {
		return false
	}
	n, _ := s.table.PendingClaims()
	return n == 0
}

// checkServedLocked tells Resume.TermServed, once per term, when the term
// has served its grace whole. mu must be held.
func (s *Server) checkServedLocked() {
	if s.servedTold || s.cfg.Resume == nil || !s.serving.Load() || s.handingOver || !s.servedLocked() {
		return
	}
	s.servedTold = true
	epoch, src := s.epoch, s.cfg.Resume
	s.goLocked(func() { src.TermServed(epoch) })
}

// rotate starts a new generation of credentials every
// Resume.GenerationPeriod of serving, outside any grace and while no claim
// of a handover is pending (those may still come back with a credential of
// the generation they were listed in), until the server stops.
func (s *Server) rotate() {
	const recheck = time.Second
	t := time.NewTimer(recheck)
	defer t.Stop()
	for {
		s.mu.Lock()
		due := s.genAt.Add(s.cfg.Resume.GenerationPeriod())
		wait := due.Sub(s.now())
		may := wait <= 0 && s.serving.Load() && !s.closing.Load() && !s.handingOver && s.servedLocked()
		s.mu.Unlock()
		if may {
			if err := s.newGeneration(); err != nil {
				s.log.Warn("cannot start a new generation of credentials; retrying", "err", err)
			}
			wait = recheck
		}
		t.Reset(min(max(wait, 10*time.Millisecond), recheck))
		select {
		case <-t.C:
		case <-s.done:
			return
		}
	}
}

// newGeneration starts the next generation of credentials now.
func (s *Server) newGeneration() error {
	gen, err := s.cfg.Resume.NewGeneration()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.genAt = s.now()
	s.mu.Unlock()
	s.log.Debug("new generation of credentials", "generation", gen)
	return nil
}

// Handover is a cluster leader's planned handover under way (HandOver).
type Handover struct {
	list     *HandoverList
	unclosed []unclosedHolder
	drained  chan struct{}
}

// HandOver begins a cluster leader's planned handover to the node whose
// client address is successor: in one hold of the table's lock it stops
// confirming and takes the list (the claims of version 3 with a
// credential, as they stand at this moment); then it tells every session,
// holders first: NOT_LEADER naming successor to the claims of version 3
// with a credential, SHUTDOWN to the others, and promotes nobody. From
// here on a close of a listed claim's connection is not a release, and
// operators' actions are refused (ErrHandingOver). Until the next
// BeginTerm every ACQUIRE is answered NOT_LEADER naming successor.
func (s *Server) HandOver(successor string) *Handover {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &Handover{drained: make(chan struct{})}
	now := s.now()
	s.successorHint.Store(&successor)
	if s.serving.Load() {
		h.list = s.takeListLocked(now)
		h.unclosed, s.unclosed = s.unclosed, nil
	}
	s.handingOver = true
	s.serving.Store(false) // before the ends: no promotion on the way out
	s.wakeTermLocked()
	for _, c := range s.connsHoldersFirstLocked(now) {
		if c.v3 != nil {
			s.endLocked(now, c, ReasonNotLeader, successor)
		} else {
			s.endLocked(now, c, ReasonShutdown, "leader handing over")
		}
	}
	gone := make([]chan struct{}, 0, len(h.unclosed))
	for _, u := range h.unclosed {
		gone = append(gone, u.gone)
	}
	// Closed by the linger time at the latest, or never when a holder is
	// not seen to close; the caller's own wait bounds it.
	s.goLocked(func() {
		for _, ch := range gone {
			select {
			case <-ch:
			case <-s.done:
				return
			case <-time.After(s.linger + time.Second):
				return
			}
		}
		close(h.drained)
	})
	return h
}

// Drained is closed once every holder told SHUTDOWN was seen to close
// (at once for a nil Handover: nothing to drain).
func (h *Handover) Drained() <-chan struct{} {
	if h == nil || h.drained == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return h.drained
}

// List is the handover's list, with the holders told SHUTDOWN that were
// not seen to close (listed, not to be resumed); nil if the server did
// not serve when the handover began.
func (h *Handover) List() *HandoverList {
	if h == nil || h.list == nil {
		return nil
	}
	l := *h.list
	l.Claims = append([]HandoverClaim(nil), h.list.Claims...)
	for _, u := range h.unclosed {
		select {
		case <-u.gone:
		default:
			l.Claims = append(l.Claims, u.claim)
		}
	}
	return &l
}
