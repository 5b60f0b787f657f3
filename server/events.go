package server

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/batonlock/baton/locktable"
)

// The event types of docs/operations.md's EVENT.
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

// Event is one change of the lock table, as docs/operations.md's EVENT
// describes it.
type Event struct {
	Seq  uint64 // rises by one per event, from 1, for the life of the process
	At   time.Time
	Type string
	Lock string
	// Session is the session as it was at the change; for a grant, Since
	// is how long it waited in the queue (zero for a grant at once).
	Session SessionView
}

// Subscription is a reader of the event history with its own cursor. It
// never slows the lock table: publishing an event costs the same with any
// number of subscribers (the ring and one wake-up), and a subscriber that
// falls a whole history behind gets ErrFellBehind instead of events.
type Subscription struct {
	srv  *Server
	lock string // "" for every lock
	// Guarded by srv.mu.
	cursor uint64 // the seq of the last event this subscriber has passed
	closed bool
	// scratch is Read's, reused: the records taken under the mutex.
	scratch []record
}

// Errors of Subscription.Read.
var (
	// ErrFellBehind: the history no longer holds the events after the
	// subscriber's cursor; it must start again from a snapshot.
	ErrFellBehind = errors.New("event subscriber fell behind the history")
	// ErrSubscriptionClosed: Close was called, or the server shut down.
	ErrSubscriptionClosed = errors.New("event subscription closed")
)

// Read appends to dst up to max events after the cursor (of the
// subscription's lock, if set) and moves the cursor past them. When there
// are none it returns a channel that is closed when the next event comes.
// The events' text is made after the server's mutex is released. One
// goroutine at a time may read a subscription.
func (sub *Subscription) Read(dst []Event, max int) ([]Event, <-chan struct{}, error) {
	recs, wake, err := sub.take(max)
	for i := range recs {
		dst = append(dst, recs[i].event())
	}
	return dst, wake, err
}

// take is Read's part under the server's mutex: the records, in the
// subscription's scratch (one reader per subscription).
func (sub *Subscription) take(max int) ([]record, <-chan struct{}, error) {
	s := sub.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.events
	if sub.closed || s.stopped {
		return nil, nil, ErrSubscriptionClosed
	}
	if sub.cursor > l.last || sub.cursor+1 < l.oldestLocked() {
		return nil, nil, ErrFellBehind
	}
	n := len(l.ring)
	oldest := l.oldestLocked()
	recs := sub.scratch[:0]
	for seq := sub.cursor + 1; seq <= l.last && max > 0; seq++ {
		r := &l.ring[(l.head+int(seq-oldest))%n]
		sub.cursor = seq
		if sub.lock == "" || r.lock == sub.lock {
			recs = append(recs, *r)
			max--
		}
	}
	sub.scratch = recs[:0]
	if len(recs) > 0 {
		return recs, nil, nil
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return nil, l.wake, nil
}

// Close ends the subscription. It may be called more than once.
func (sub *Subscription) Close() {
	sub.srv.mu.Lock()
	defer sub.srv.mu.Unlock()
	sub.closed = true
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
	// History asks for up to this many of the latest events (of Lock, if
	// set) before the feed's start, for a view of what just happened.
	History int
}

// SubscribeResult is the start of a feed, taken at one instant under the
// server's mutex, so that nothing falls between it and the events read.
type SubscribeResult struct {
	Sub *Subscription
	// Resync is true when the history no longer holds the events after the
	// requested sequence number (or the number is from another run of the
	// server): Locks then holds the state to start again from, and the
	// feed starts after Seq.
	Resync bool
	// Locks is the state of the locks (only Lock's, if set) when Snapshot
	// was asked for or Resync is true.
	Locks []LockView
	// Seq is the sequence number of the last event when the feed started.
	Seq uint64
	// History holds the latest events up to Seq, oldest first, when asked for.
	History []Event
}

// Subscribe starts a feed of events: after req.After when resuming and the
// history allows it, else after the last event. The caller must Close it.
func (s *Server) Subscribe(req SubscribeRequest) SubscribeResult {
	res, history := s.subscribe(req)
	for i := range history {
		res.History = append(res.History, history[i].event())
	}
	return res
}

// subscribe is Subscribe's part under the server's mutex; the history's
// records, oldest first, are made events after it.
func (s *Server) subscribe(req SubscribeRequest) (SubscribeResult, []record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.events
	sub := &Subscription{srv: s, lock: req.Lock, cursor: l.last}
	res := SubscribeResult{Sub: sub, Seq: l.last}
	if req.Resume {
		if req.After <= l.last && req.After+1 >= l.oldestLocked() {
			sub.cursor = req.After
		} else {
			res.Resync = true
		}
	}
	var history []record
	if req.History > 0 {
		n := len(l.ring)
		for i := n - 1; i >= 0 && len(history) < req.History; i-- {
			if r := &l.ring[(l.head+i)%n]; req.Lock == "" || r.lock == req.Lock {
				history = append(history, *r)
			}
		}
		slices.Reverse(history)
	}
	if req.Snapshot || res.Resync {
		now := s.now()
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
	return res, history
}

// eventLog is the history ring. Guarded by Server.mu.
type eventLog struct {
	ring []record // grows to EventHistory, then overwrites the oldest
	head int      // index of the oldest event once the ring is full
	last uint64   // seq of the newest event; 0 before the first
	// wake is closed at the next event, for the subscribers waiting for
	// it; nil when none waits.
	wake chan struct{}
}

// publishLocked records an event and wakes the waiting subscribers: one
// channel close, whatever their number. mu must be held.
func (l *eventLog) publishLocked(r *record) {
	l.last++
	r.seq = l.last
	if len(l.ring) < EventHistory {
		l.ring = append(l.ring, *r)
	} else {
		l.ring[l.head] = *r
		l.head = (l.head + 1) % EventHistory
	}
	l.wakeLocked()
}

// record is an event as the history keeps it: an Event without the text a
// reader can make from it (the session id's decimal, the client's
// address), so that recording one, three times a grant, allocates nothing.
type record struct {
	seq                  uint64
	at                   time.Time
	typ                  string // one of the Event constants
	lock, owner          string
	remote               net.Addr // nil if the session had left s.sessions
	id                   locktable.SessionID
	lease, since, silent time.Duration
	token                uint64
	held, shared         bool
}

// event is r as subscribers see it.
func (r *record) event() Event {
	return Event{Seq: r.seq, At: r.at, Type: r.typ, Lock: r.lock, Session: SessionView{
		ID:     strconv.FormatUint(uint64(r.id), 10),
		Owner:  r.owner,
		Lease:  r.lease,
		Shared: r.shared,
		Held:   r.held,
		Token:  r.token,
		Since:  r.since,
		Silent: r.silent,
		Remote: addrText(r.remote),
	}}
}

// wakeLocked wakes every waiting subscriber. mu must be held.
func (l *eventLog) wakeLocked() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// oldestLocked is the seq of the oldest event kept (last+1 when none). mu
// must be held.
func (l *eventLog) oldestLocked() uint64 { return l.last - uint64(len(l.ring)) + 1 }

// eventLocked records what happened to session in of lock, at the wall
// clock's time: the event's time is for people, not the table's clock (a
// reading of Server.now). mu must be held.
func (s *Server) eventLocked(typ string, in locktable.Info) {
	r := record{at: time.Now(), typ: typ, lock: in.Name, owner: in.Owner, id: in.ID,
		lease: in.Lease, since: in.Since, silent: in.Silent, token: in.Token, held: in.Held, shared: in.Shared}
	if c := s.sessions[in.ID]; c != nil {
		r.remote = c.remote
	}
	s.events.publishLocked(&r)
}

// exitEventLocked records a session's exit from the table. mu must be held,
// and the session must still be in s.sessions (for its remote address).
func (s *Server) exitEventLocked(e locktable.Exit) {
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
	s.eventLocked(typ, e.Session)
}

// grantEventLocked records the promotion g. At a grant the time held is
// zero, so the event's Since tells how long the session waited for it. mu
// must be held.
func (s *Server) grantEventLocked(now time.Time, g locktable.Grant) {
	if in, ok := s.table.Session(now, g.ID); ok {
		in.Since = g.Waited
		s.eventLocked(EventGranted, in)
	}
}
