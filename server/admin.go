package server

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/batonlock/baton/locktable"
)

// snapshotStep is how many sessions a listing of the locks copies per hold
// of the server's mutex, the one that grants: a large table is copied in
// steps between which ACQUIREs, heartbeats and handovers go on, so that
// operators polling it cannot hold up the locks (a step takes some tens of
// microseconds).
const snapshotStep = 256

// Locks describes every lock that has a holder or waiters, sorted by name.
// A large table is read in steps (snapshotStep), not at one instant: each
// lock's holder is as of its first step, and a session that joins or
// leaves a long queue while it is read may be missing from it.
func (s *Server) Locks() []LockView {
	s.mu.Lock()
	names := s.table.Names(make([]string, 0, s.table.Locks()))
	s.mu.Unlock()
	slices.Sort(names)
	out := make([]LockView, 0, len(names))
	for _, name := range names {
		if lv, ok := s.lockInSteps(name); ok {
			out = append(out, lv)
		}
	}
	return out
}

// Lock describes one lock; false if nobody holds or waits. A long queue is
// read in steps, as by Locks.
func (s *Server) Lock(name string) (LockView, bool) { return s.lockInSteps(name) }

// lockInSteps reads lock name a page of its holders, then of its queue,
// at a time (snapshotStep sessions), each page under the mutex, and makes
// the view's text outside it.
func (s *Server) lockInSteps(name string) (LockView, bool) {
	var (
		holders, waiters []locktable.Info
		hremotes         []peer
		remotes          []peer // the waiters'
		limit            int
		seen             map[locktable.SessionID]bool
	)
	// The holders: a semaphore may have many.
	var after locktable.SessionID
	for skip := 0; ; {
		s.mu.Lock()
		page, more := s.table.HolderPage(s.now(), name, after, skip, snapshotStep)
		for _, h := range page {
			if seen != nil && seen[h.ID] {
				continue
			}
			holders = append(holders, h)
			hremotes = append(hremotes, s.peerLocked(h))
		}
		s.mu.Unlock()
		if !more {
			break
		}
		if seen == nil {
			seen = make(map[locktable.SessionID]bool, len(holders))
		}
		for _, h := range page {
			seen[h.ID] = true
		}
		skip += len(page)
		after = page[len(page)-1].ID
	}
	seen = nil
	after = 0
	for skip := 0; ; {
		s.mu.Lock()
		li, more, ok := s.table.LockPage(s.now(), name, after, skip, snapshotStep)
		if !ok {
			s.mu.Unlock()
			if skip == 0 && len(holders) == 0 {
				return LockView{}, false
			}
			break // emptied while it was read
		}
		if skip == 0 {
			limit = li.Limit
		}
		for _, w := range li.Waiters {
			// The queue may have moved between pages: a session is shown once.
			if seen != nil && seen[w.ID] {
				continue
			}
			waiters = append(waiters, w)
			remotes = append(remotes, s.peerLocked(w))
		}
		s.mu.Unlock()
		if !more {
			break
		}
		if seen == nil {
			seen = make(map[locktable.SessionID]bool, len(waiters))
		}
		for _, w := range li.Waiters {
			seen[w.ID] = true
		}
		skip += len(li.Waiters)
		after = li.Waiters[len(li.Waiters)-1].ID
	}
	lv := LockView{Name: name, Limit: limit, Waiters: make([]SessionView, len(waiters))}
	if len(holders) > 0 {
		lv.Holders = make([]SessionView, len(holders))
		for i, h := range holders {
			lv.Holders[i] = sessionView(h, hremotes[i])
		}
		lv.Holder = &lv.Holders[0]
	}
	for i, w := range waiters {
		lv.Waiters[i] = sessionView(w, remotes[i])
	}
	return lv, true
}

// remoteLocked is the address of session id's client, nil if unknown. mu
// must be held.
func (s *Server) remoteLocked(id locktable.SessionID) net.Addr {
	if c := s.sessions[id]; c != nil {
		return c.remote
	}
	return nil
}

// peer is what the server knows of a session beyond the table: its
// client's address, and the epoch it resumed from (0: never resumed).
type peer struct {
	addr net.Addr
	from uint64
}

// peerLocked is in's peer. mu must be held.
func (s *Server) peerLocked(in locktable.Info) peer {
	p := peer{}
	if c := s.sessions[in.ID]; c != nil {
		p.addr = c.remote
		if c.v3 != nil {
			p.from = c.v3.resumedFrom
		}
	}
	if p.from == 0 && in.Resumed {
		id := in.Token
		if id == 0 || in.Ticket != 0 && in.Ticket < id {
			id = in.Ticket
		}
		p.from = id >> epochShift
	}
	return p
}

// ForceRelease ends every holder's session of lock name with ERROR
// FORCE_RELEASED, in grant order, and then moves the queue once. It returns
// the first ended session (the holder of a mutex; ForceReleaseAll returns
// every one), or ErrNotHeld if nobody holds the lock.
func (s *Server) ForceRelease(name string) (SessionView, error) {
	ended, err := s.ForceReleaseAll(name)
	if err != nil {
		return SessionView{}, err
	}
	return ended[0], nil
}

// ForceReleaseAll is ForceRelease returning every ended holder, in grant
// order. It ends exactly the holders of the instant it is called, in steps
// of bulkStep holders, each one hold of the mutex, between which other
// sessions come and go: a holder that leaves meanwhile is not among those
// returned, and a claim granted meanwhile (to a slot the release freed, or
// a free one) is not ended.
func (s *Server) ForceReleaseAll(name string) ([]SessionView, error) {
	var (
		through uint64 // the newest holder's token when asked
		ended   []locktable.Info
		remotes []peer
	)
	through, err := s.freezeRelease(name)
	if err != nil {
		return nil, err
	}
	for more := through != 0; more; {
		var fx effects
		s.mu.Lock()
		now := s.now()
		s.mayServeLocked(now) // the release promotes: fail closed first if need be
		var exits []locktable.Exit
		var err error
		exits, more, err = s.table.ForceReleaseThrough(now, name, through, bulkStep, s.exits[:0])
		if err != nil && !errors.Is(err, locktable.ErrNotHeld) { // not held: the rest left meanwhile
			s.mu.Unlock()
			return nil, err
		}
		for _, e := range exits {
			if e.Cause == locktable.CauseForceReleased {
				ended = append(ended, e.Session)
				remotes = append(remotes, s.peerLocked(e.Session))
			}
		}
		s.settleLocked(now, exits, &fx)
		s.mu.Unlock()
		s.deliver(&fx)
	}
	if len(ended) == 0 { // every holder left before the first step
		if through == 0 {
			return nil, ErrEarlierClaimsRefused
		}
		return nil, ErrNotHeld
	}
	views := make([]SessionView, len(ended))
	for i, in := range ended {
		views[i] = sessionView(in, remotes[i])
	}
	return views, nil
}

// freezeRelease begins an operator's release of lock name: it returns the
// token through which the name's holders are released (0 when nobody
// holds it), having frozen those of version 3 that may come back elsewhere
// and recorded their ends, so that no confirmation, move or later server
// lets them go on. In a crash grace it also records that no claim of the
// name of an earlier term may come back (ErrEarlierClaimsRefused answers a
// name none of whose holders has come back yet).
func (s *Server) freezeRelease(name string) (uint64, error) {
	s.mu.Lock()
	if s.handingOver {
		s.mu.Unlock()
		return 0, ErrHandingOver
	}
	now := s.now()
	through, held := s.table.NewestToken(name)
	var recs []EndRecord
	if _, grace := s.table.GraceUntil(); grace && s.resumeBelow > 0 && s.cfg.Resume != nil {
		recs = append(recs, EndRecord{Kind: RecordNameReleased, Name: name, Below: s.resumeBelow, Epoch: s.epoch})
	}
	if held {
		holders, _ := s.table.HolderPage(now, name, 0, 0, math.MaxInt32)
		for _, h := range holders {
			if h.Token <= through && s.mustRecordLocked(h) {
				recs = append(recs, EndRecord{Kind: RecordReleased, Name: name, Held: true, ID: h.Token, Epoch: s.epoch})
			}
		}
	}
	switch {
	case !held && len(recs) == 0:
		s.mu.Unlock()
		return 0, ErrNotHeld
	case len(recs) == 0:
		s.mu.Unlock()
		return through, nil
	case held:
		s.table.FreezeThrough(name, through)
	}
	s.mu.Unlock()
	if err := s.recordEnds(recs); err != nil {
		return 0, err
	}
	return through, nil
}

// mustRecordLocked reports whether the end of claim in must be recorded
// before it leaves the table: a claim of version 3 with a credential (on a
// connection, pending, or waiting out its lease after a broken one), which
// may come back on another server. mu must be held.
func (s *Server) mustRecordLocked(in locktable.Info) bool {
	if s.cfg.Resume == nil {
		return false
	}
	if in.Pending {
		return s.pendingIDs[in.ID]
	}
	if _, ok := s.detached[in.ID]; ok {
		return true
	}
	c := s.sessions[in.ID]
	return c != nil && c.v3 != nil
}

// recordEnds makes an operator's records durable; ErrNotRecorded if they
// could not be.
func (s *Server) recordEnds(recs []EndRecord) error {
	if err := s.cfg.Resume.Record(recs); err != nil {
		s.log.Error("cannot record an operator's release or kick; the claims stay frozen until their leases run out", "claims", len(recs), "err", err)
		return fmt.Errorf("%w: %v", ErrNotRecorded, err)
	}
	s.m.recorded.Add(float64(len(recs)))
	return nil
}

// ReleaseSession ends holder id alone with ERROR FORCE_RELEASED, and moves
// the queue for the slot it frees. It returns the ended session,
// ErrUnknownSession if there is no such session, or ErrWaiter if it waits
// (use Kick).
func (s *Server) ReleaseSession(id string) (SessionView, error) { return s.ReleaseSessionIf(id, nil) }

// ReleaseSessionIf is ReleaseSession for a caller whose right to release
// depends on the lock, as KickIf is Kick's.
func (s *Server) ReleaseSessionIf(id string, allow func(lock string) error) (SessionView, error) {
	return s.endSessionIf(id, allow, true, func(now time.Time, sid locktable.SessionID) ([]locktable.Exit, error) {
		exits, err := s.table.ForceReleaseSession(now, sid, s.exits[:0])
		if errors.Is(err, locktable.ErrWaiter) {
			return nil, ErrWaiter
		}
		return exits, err
	})
}

// Kick ends waiter id with ERROR KICKED. It returns the ended session,
// ErrUnknownSession if there is no such session, or ErrHolder if it holds
// its lock.
func (s *Server) Kick(id string) (SessionView, error) { return s.KickIf(id, nil) }

// KickIf is Kick for a caller whose right to kick depends on the lock:
// allow, if not nil, is called with the name of the lock that session id
// holds or waits for, and an error from it is returned as it is, with
// nothing done. The check and the kick are one step under the table's
// mutex, so no session can come or go between them; allow must not block.
func (s *Server) KickIf(id string, allow func(lock string) error) (SessionView, error) {
	return s.endSessionIf(id, allow, false, func(now time.Time, sid locktable.SessionID) ([]locktable.Exit, error) {
		exits, err := s.table.Kick(now, sid, s.exits[:0])
		if errors.Is(err, locktable.ErrHolder) {
			return nil, ErrHolder
		}
		return exits, err
	})
}

// endSessionIf ends session id by end (a release of a holder, or a kick of
// a waiter), after allow (if not nil) has accepted its lock, all in one
// step under mu; a claim of version 3 is frozen and its end recorded
// first, with mu released meanwhile.
func (s *Server) endSessionIf(id string, allow func(lock string) error, release bool, end func(time.Time, locktable.SessionID) ([]locktable.Exit, error)) (SessionView, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return SessionView{}, ErrUnknownSession
	}
	sid := locktable.SessionID(n)
	var fx effects
	defer s.deliver(&fx) // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handingOver {
		return SessionView{}, ErrHandingOver
	}
	now := s.now()
	s.mayServeLocked(now) // the end may promote: fail closed first if need be
	in, ok := s.table.Session(now, sid)
	if allow != nil {
		if !ok {
			return SessionView{}, ErrUnknownSession
		}
		if err := allow(in.Name); err != nil {
			return SessionView{}, err
		}
	}
	if ok && s.mustRecordLocked(in) {
		// A claim of version 3 that may come back elsewhere: frozen now
		// (confirmed no more, never moved), recorded, then ended, so that
		// no later server takes it back.
		if in.Held == release { // else the wrong kind: end answers it below
			s.table.Freeze(sid)
			rec := EndRecord{Kind: RecordKicked, Name: in.Name, ID: in.Ticket, Epoch: s.epoch}
			if in.Held {
				rec.Kind, rec.Held, rec.ID = RecordReleased, true, in.Token
			}
			s.mu.Unlock()
			err := s.recordEnds([]EndRecord{rec})
			s.mu.Lock()
			if err != nil {
				return SessionView{}, err
			}
			now = s.now()
			if _, still := s.table.Session(now, sid); !still {
				// Gone meanwhile (its client closed, its lease ran out):
				// what was asked is done.
				return s.sessionViewLocked(in), nil
			}
		}
	}
	exits, err := end(now, sid)
	if errors.Is(err, locktable.ErrUnknownSession) {
		return SessionView{}, ErrUnknownSession
	}
	return s.adminExitsLocked(now, exits, err, &fx)
}

// adminExitsLocked applies the exits of an operator's action, whose own
// session is the first exit, into fx. mu must be held.
func (s *Server) adminExitsLocked(now time.Time, exits []locktable.Exit, err error, fx *effects) (SessionView, error) {
	if err != nil {
		return SessionView{}, err
	}
	view := s.sessionViewLocked(exits[0].Session)
	s.settleLocked(now, exits, fx)
	return view, nil
}

func (s *Server) lockViewLocked(li locktable.LockInfo) LockView {
	lv := LockView{Name: li.Name, Limit: li.Limit, Waiters: make([]SessionView, len(li.Waiters))}
	if len(li.Holders) > 0 {
		lv.Holders = make([]SessionView, len(li.Holders))
		for i, h := range li.Holders {
			lv.Holders[i] = s.sessionViewLocked(h)
		}
		lv.Holder = &lv.Holders[0]
	}
	for i, w := range li.Waiters {
		lv.Waiters[i] = s.sessionViewLocked(w)
	}
	return lv
}

func (s *Server) sessionViewLocked(in locktable.Info) SessionView {
	return sessionView(in, s.peerLocked(in))
}

// sessionView is in as operators see it, with what the server knows of
// its client.
func sessionView(in locktable.Info, p peer) SessionView {
	return SessionView{
		ID:               strconv.FormatUint(uint64(in.ID), 10),
		Owner:            in.Owner,
		Lease:            in.Lease,
		Shared:           in.Shared,
		Held:             in.Held,
		Token:            in.Token,
		Since:            in.Since,
		Silent:           in.Silent,
		Remote:           addrText(p.addr),
		Pending:          in.Pending,
		ResumedFromEpoch: p.from,
	}
}

// addrText is a's text, "" for none.
func addrText(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
