package server

import (
	"time"

	"github.com/batonlock/baton/locktable"
)

// The event types of OPS.md's EVENT.
const (
	EventQueued        = "queued"         // a session joined a lock's queue
	EventGranted       = "granted"        // a session got the lock (at once or by promotion)
	EventReleased      = "released"       // the holder's connection ended
	EventExpired       = "expired"        // a holder or waiter was silent for its lease
	EventForceReleased = "force_released" // an operator took the lock from its holder
	EventKicked        = "kicked"         // an operator removed a waiter
	EventLeft          = "left"           // a waiter's connection ended
)

// EventHistory is how many events the server keeps for subscribers that
// resume after a dropped stream.
const EventHistory = 10000

// Event is one change of the lock table, as OPS.md's EVENT describes it.
type Event struct {
	Seq  uint64 // rises by one per event, from 1, for the life of the process
	At   time.Time
	Type string
	Lock string
	// Session is the session as it was at the change; for a grant, Since
	// is how long it waited in the queue (zero for a grant at once).
	Session SessionView
}

// Subscription is a live feed of events. It never slows the lock table:
// events are handed over without blocking, and a subscriber whose buffer
// is full is cut off (its channel closed, Overflowed true).
type Subscription struct {
	srv  *Server
	lock string // "" for every lock
	ch   chan Event
	// Guarded by srv.mu.
	overflowed bool
	closed     bool
}

// Events delivers the events after the backlog, in order. It is closed when
// the subscriber fell behind, when Close is called, or at Shutdown.
func (sub *Subscription) Events() <-chan Event { return sub.ch }

// Overflowed reports whether the feed was closed because the subscriber
// fell behind (its buffer was full when an event came).
func (sub *Subscription) Overflowed() bool {
	sub.srv.mu.Lock()
	defer sub.srv.mu.Unlock()
	return sub.overflowed
}

// Close ends the subscription. It may be called more than once.
func (sub *Subscription) Close() {
	sub.srv.mu.Lock()
	defer sub.srv.mu.Unlock()
	sub.srv.events.dropLocked(sub)
}

// SubscribeRequest says what a subscriber wants.
type SubscribeRequest struct {
	Lock string // only this lock's events; "" for all
	// Resume asks for the events after sequence number After, from the
	// history, before the live ones.
	Resume bool
	After  uint64
	// Snapshot asks for the state of the locks at the instant the feed
	// starts (always given when a resume cannot be served).
	Snapshot bool
	// Buffer is how many events may wait for the subscriber before it is
	// cut off. Zero means 1024.
	Buffer int
}

// SubscribeResult is the start of a feed, taken at one instant under the
// server's mutex, so that nothing falls between it and the live events.
type SubscribeResult struct {
	Sub *Subscription
	// Backlog holds the history after the requested sequence number.
	Backlog []Event
	// Resync is true when the history no longer holds the events after the
	// requested sequence number (or the number is from another run of the
	// server): Locks then holds the state to start again from.
	Resync bool
	// Locks is the state of the locks (only Lock's, if set) when Snapshot
	// was asked for or Resync is true.
	Locks []LockView
	// Seq is the sequence number of the last event before the live ones.
	Seq uint64
}

// Subscribe starts a feed of events. The caller must Close the subscription.
func (s *Server) Subscribe(req SubscribeRequest) SubscribeResult {
	if req.Buffer <= 0 {
		req.Buffer = 1024
	}
	sub := &Subscription{srv: s, lock: req.Lock, ch: make(chan Event, req.Buffer)}
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := &s.events
	res := SubscribeResult{Sub: sub, Seq: ev.last}
	if req.Resume {
		var ok bool
		res.Backlog, ok = ev.sinceLocked(req.After, req.Lock)
		res.Resync = !ok
	}
	if req.Snapshot || res.Resync {
		now := time.Now()
		if req.Lock != "" {
			if li, ok := s.table.Lock(now, req.Lock); ok {
				res.Locks = []LockView{s.lockViewLocked(li)}
			}
		} else {
			for _, li := range s.table.Snapshot(now) {
				res.Locks = append(res.Locks, s.lockViewLocked(li))
			}
		}
	}
	if s.stopped {
		sub.closed = true
		close(sub.ch)
		return res
	}
	if ev.subs == nil {
		ev.subs = make(map[*Subscription]struct{})
	}
	ev.subs[sub] = struct{}{}
	return res
}

// eventLog is the history ring and the live subscribers. Guarded by Server.mu.
type eventLog struct {
	ring []Event // grows to EventHistory, then overwrites the oldest
	head int     // index of the oldest event once the ring is full
	last uint64  // seq of the newest event; 0 before the first
	subs map[*Subscription]struct{}
}

// publishLocked records an event and hands it to each subscriber without
// blocking. mu must be held.
func (l *eventLog) publishLocked(e Event) {
	l.last++
	e.Seq = l.last
	if len(l.ring) < EventHistory {
		l.ring = append(l.ring, e)
	} else {
		l.ring[l.head] = e
		l.head = (l.head + 1) % EventHistory
	}
	for sub := range l.subs {
		if sub.lock != "" && sub.lock != e.Lock {
			continue
		}
		select {
		case sub.ch <- e:
		default: // fell behind: cut it off rather than wait for it
			sub.overflowed = true
			l.dropLocked(sub)
		}
	}
}

// sinceLocked returns the events after seq (of lock, if not ""); false if
// the history no longer holds them all or seq is in the future. mu must be
// held.
func (l *eventLog) sinceLocked(seq uint64, lock string) ([]Event, bool) {
	if seq > l.last {
		return nil, false // from another run of the server
	}
	if seq == l.last {
		return nil, true
	}
	oldest := l.last - uint64(len(l.ring)) + 1
	if seq+1 < oldest {
		return nil, false
	}
	var out []Event
	n := len(l.ring)
	for i := int(seq + 1 - oldest); i < n; i++ {
		e := l.ring[(l.head+i)%n]
		if lock == "" || e.Lock == lock {
			out = append(out, e)
		}
	}
	return out, true
}

// dropLocked removes sub and closes its channel. mu must be held.
func (l *eventLog) dropLocked(sub *Subscription) {
	if sub.closed {
		return
	}
	sub.closed = true
	delete(l.subs, sub)
	close(sub.ch)
}

// closeAllLocked ends every subscription (at Shutdown). mu must be held.
func (l *eventLog) closeAllLocked() {
	for sub := range l.subs {
		l.dropLocked(sub)
	}
}

// eventLocked records what happened to session in of lock at now. mu must be held.
func (s *Server) eventLocked(now time.Time, typ string, in locktable.Info) {
	v := s.sessionViewLocked(in)
	s.events.publishLocked(Event{At: now, Type: typ, Lock: in.Name, Session: v})
}

// exitEventLocked records a session's exit from the table. mu must be held,
// and the session must still be in s.sessions (for its remote address).
func (s *Server) exitEventLocked(now time.Time, e locktable.Exit) {
	var typ string
	switch e.Cause {
	case locktable.CauseReleased:
		typ = EventLeft
		if e.Session.Held {
			typ = EventReleased
		}
	case locktable.CauseExpired:
		typ = EventExpired
	case locktable.CauseForceReleased:
		typ = EventForceReleased
	case locktable.CauseKicked:
		typ = EventKicked
	default:
		return
	}
	s.eventLocked(now, typ, e.Session)
}

// grantEventLocked records the promotion g. At a grant the time held is
// zero, so the event's Since tells how long the session waited for it. mu
// must be held.
func (s *Server) grantEventLocked(now time.Time, g locktable.Grant) {
	if in, ok := s.table.Session(now, g.ID); ok {
		in.Since = g.Waited
		s.eventLocked(now, EventGranted, in)
	}
}
