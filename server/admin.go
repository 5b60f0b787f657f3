package server

import (
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/batonlock/baton/locktable"
)

// Locks describes every lock that has a holder or waiters, sorted by name.
func (s *Server) Locks() []LockView {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	snap := s.table.Snapshot(now)
	out := make([]LockView, len(snap))
	for i, li := range snap {
		out[i] = s.lockViewLocked(li)
	}
	return out
}

// Lock describes one lock; false if nobody holds or waits.
func (s *Server) Lock(name string) (LockView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	li, ok := s.table.Lock(time.Now(), name)
	if !ok {
		return LockView{}, false
	}
	return s.lockViewLocked(li), true
}

// ForceRelease ends the holder's session of lock name with ERROR
// FORCE_RELEASED and promotes the next waiter at once. It returns the ended
// session, or ErrNotHeld if nobody holds the lock.
func (s *Server) ForceRelease(name string) (SessionView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	exits, err := s.table.ForceRelease(now, name, s.exits[:0])
	if errors.Is(err, locktable.ErrNotHeld) {
		return SessionView{}, ErrNotHeld
	}
	return s.adminExitsLocked(now, exits, err)
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
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return SessionView{}, ErrUnknownSession
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if allow != nil {
		in, ok := s.table.Session(now, locktable.SessionID(n))
		if !ok {
			return SessionView{}, ErrUnknownSession
		}
		if err := allow(in.Name); err != nil {
			return SessionView{}, err
		}
	}
	exits, err := s.table.Kick(now, locktable.SessionID(n), s.exits[:0])
	switch {
	case errors.Is(err, locktable.ErrUnknownSession):
		return SessionView{}, ErrUnknownSession
	case errors.Is(err, locktable.ErrHolder):
		return SessionView{}, ErrHolder
	}
	return s.adminExitsLocked(now, exits, err)
}

// adminExitsLocked applies the exits of an operator's action, whose own
// session is the first exit, and starts the writes. mu must be held.
func (s *Server) adminExitsLocked(now time.Time, exits []locktable.Exit, err error) (SessionView, error) {
	if err != nil {
		return SessionView{}, err
	}
	view := s.sessionViewLocked(exits[0].Session)
	s.settleLocked(now, exits)
	return view, nil
}

func (s *Server) lockViewLocked(li locktable.LockInfo) LockView {
	lv := LockView{Name: li.Name, Waiters: make([]SessionView, len(li.Waiters))}
	if li.Holder != nil {
		h := s.sessionViewLocked(*li.Holder)
		lv.Holder = &h
	}
	for i, w := range li.Waiters {
		lv.Waiters[i] = s.sessionViewLocked(w)
	}
	return lv
}

func (s *Server) sessionViewLocked(in locktable.Info) SessionView {
	v := SessionView{
		ID:     strconv.FormatUint(uint64(in.ID), 10),
		Owner:  in.Owner,
		Lease:  in.Lease,
		Held:   in.Held,
		Token:  in.Token,
		Since:  in.Since,
		Silent: in.Silent,
	}
	if c := s.sessions[in.ID]; c != nil {
		v.Remote = addrText(c.remote)
	}
	return v
}

// addrText is a's text, "" for none.
func addrText(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
