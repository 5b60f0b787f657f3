package idlepoll

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Poller is the shards that serve parked sessions of type T (a pointer,
// each with a Conn of its own), for a Handler.
type Poller[T comparable] struct {
	h      Handler[T]
	shards []*Shard[T]
	next   atomic.Uint32 // the shard of the next session, round robin
}

// Shard is one epoll instance and the sessions registered with it, with
// the goroutine (Run) that answers them.
type Shard[T comparable] struct {
	h      Handler[T]
	gauge  Gauge
	epfd   int
	file   *os.File        // epfd, registered with Go's poller
	ep     syscall.RawConn // waits for epfd through Go's poller
	events []unix.EpollEvent
	// rbuf is what the shard reads a parked session's frames into (Buf):
	// sized by the handler (Config.BufSize) so that a read returning less
	// has drained the socket (see watchEvents).
	rbuf []byte
	// more are the sessions the shard serves that may have more frames
	// unread (a Serve that said readAgain), oldest first: each is read
	// once a turn, beside the sessions that epoll reports. Only the
	// shard's goroutine touches it.
	more []T
	turn []T // serveMore's scratch
	// moreAt is when the shard last took a turn of more.
	moreAt   time.Time
	moreTurn int           // Config.MoreTurn
	morePace time.Duration // Config.MorePace
	// quit is set by Stop: the shard's goroutine returns at its next turn.
	quit atomic.Bool

	mu        sync.Mutex
	parked    []T  // by file descriptor; the zero T where none is parked (see setParked)
	stopping  bool // no new parks
	fdsClosed bool // epfd is closed
	// due lists the adopted sessions whose first frame has not come,
	// oldest first (all have the same due interval, so also by due time);
	// dueTimer hands them to Handler.Overdue when it passes. Armed while
	// due is not empty.
	dueHead, dueTail T
	dueTimer         *time.Timer
	dueArmed         bool
}

// shardEvents bounds the events one shard handles in a turn, and so how
// long a heartbeat can wait behind others of the same shard.
const shardEvents = 128

// New makes cfg.Shards shards (at least one) serving for h. Their
// goroutines are the caller's to start (Shards, Shard.Run).
func New[T comparable](h Handler[T], cfg Config) (*Poller[T], error) {
	p := &Poller[T]{h: h}
	for range max(cfg.Shards, 1) {
		sh, err := newShard(h, cfg)
		if err != nil {
			for _, sh := range p.shards {
				sh.file.Close()
			}
			return nil, err
		}
		p.shards = append(p.shards, sh)
	}
	return p, nil
}

func newShard[T comparable](h Handler[T], cfg Config) (*Shard[T], error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("idle poller: epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("idle poller: set non-blocking: %w", err)
	}
	file := os.NewFile(uintptr(epfd), "idle-poller")
	ep, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("idle poller: %w", err)
	}
	sh := &Shard[T]{h: h, gauge: cfg.Parked, epfd: epfd, file: file, ep: ep,
		events: make([]unix.EpollEvent, shardEvents), rbuf: make([]byte, cfg.BufSize),
		moreTurn: max(cfg.MoreTurn, 1), morePace: cfg.MorePace}
	sh.dueTimer = time.AfterFunc(time.Hour, sh.sweepDue)
	sh.dueTimer.Stop()
	return sh, nil
}

// Shards are the poller's shards, each of which needs a goroutine that
// runs it (Shard.Run).
func (p *Poller[T]) Shards() []*Shard[T] { return p.shards }

// collect takes the ready events of the shard's epoll descriptor fd
// without waiting, and returns how many there are.
func (sh *Shard[T]) collect(fd uintptr) int {
	n, err := unix.EpollWait(int(fd), sh.events, 0)
	for err == unix.EINTR {
		n, err = unix.EpollWait(int(fd), sh.events, 0)
	}
	if err != nil {
		return 0 // not expected; wait for the next readiness, as with none
	}
	return n
}

// Park parks v and reports true, after which the caller (v's reader) must
// return without touching the connection. It reports false when v cannot
// be parked (not bound, Handler.MayPark says no, or the poller is
// stopping), with the error if its descriptor could not be watched; the
// reader then goes on reading. Ending a session must make MayPark false
// before it calls Unpark, which takes the shard's mutex, and Park asks
// MayPark under that mutex: so either the end finds the session parked
// and wakes it, or the park sees the end.
func (p *Poller[T]) Park(v T) (bool, error) {
	e := p.conn(v)
	sh := e.shard
	if e.io.raw == nil || sh == nil {
		return false, nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.mayParkLocked(v) {
		return false, nil
	}
	if !e.registered {
		ev := unix.EpollEvent{Events: watchEvents, Fd: e.io.fd}
		if err := unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_ADD, int(e.io.fd), &ev); err != nil {
			return false, err
		}
		e.registered = true
	}
	e.parked = true
	sh.setParked(e.io.fd, v)
	sh.gauge.Inc()
	return true, nil
}

// conn is v's Conn.
func (p *Poller[T]) conn(v T) *Conn[T] { return p.h.PollConn(v) }

// setParked records v as parked on descriptor fd. Descriptors are small
// and dense, so a slice indexed by them is cheaper than a map; it grows to
// the largest descriptor parked. sh.mu must be held.
func (sh *Shard[T]) setParked(fd int32, v T) {
	if int(fd) >= len(sh.parked) {
		sh.parked = append(sh.parked, make([]T, int(fd)+1-len(sh.parked))...)
	}
	sh.parked[fd] = v
}

// parkedAt returns the session parked on descriptor fd, or the zero T.
// sh.mu must be held.
func (sh *Shard[T]) parkedAt(fd int32) T {
	if fd < 0 || int(fd) >= len(sh.parked) {
		var none T
		return none
	}
	return sh.parked[fd]
}

// mayParkLocked reports whether v may be parked. sh.mu must be held.
func (sh *Shard[T]) mayParkLocked(v T) bool {
	return !sh.stopping && sh.h.MayPark(v)
}

// Adopt parks new session v before its first frame, so that its shard
// serves it from its first frame without a goroutine of its own, and
// reports true; that frame must be whole within the given time (Overdue
// has v when it has not come by then). The due time is read and set
// (Handler.SetDue) under the shard's mutex, so the due list stays in
// order whoever adopts at once. False if it cannot (the poller is
// stopping, MayPark says no, the descriptor cannot be watched): the
// caller then starts v's reader, and v's due time is not set.
func (p *Poller[T]) Adopt(v T, within time.Duration) bool {
	e := p.conn(v)
	sh := e.shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.mayParkLocked(v) {
		return false
	}
	ev := unix.EpollEvent{Events: watchEvents, Fd: e.io.fd}
	if err := unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_ADD, int(e.io.fd), &ev); err != nil {
		return false
	}
	e.registered, e.parked = true, true
	sh.setParked(e.io.fd, v)
	sh.gauge.Inc()
	sh.h.SetDue(v, time.Now().Add(within))
	// Linked last: its due time is the latest.
	e.inDue, e.duePrev = true, sh.dueTail
	var none T
	if sh.dueTail != none {
		sh.h.PollConn(sh.dueTail).dueNext = v
	} else {
		sh.dueHead = v
	}
	sh.dueTail = v
	if !sh.dueArmed {
		sh.dueArmed = true
		sh.dueTimer.Reset(time.Until(sh.h.Due(v)))
	}
	return true
}

// unlinkDueLocked takes v (whose Conn is e) out of the due list. sh.mu
// must be held.
func (sh *Shard[T]) unlinkDueLocked(v T, e *Conn[T]) {
	if !e.inDue {
		return
	}
	var none T
	prev, next := e.duePrev, e.dueNext
	if prev != none {
		sh.h.PollConn(prev).dueNext = next
	} else {
		sh.dueHead = next
	}
	if next != none {
		sh.h.PollConn(next).duePrev = prev
	} else {
		sh.dueTail = prev
	}
	e.inDue, e.duePrev, e.dueNext = false, none, none
}

// sweepDue runs on dueTimer: the adopted sessions whose first frame has
// not come by their due time go to Handler.Overdue, unparked and out of
// the epoll set. A session the shard is serving just now leaves the list
// too; Repark then finds it out of the list (see there).
func (sh *Shard[T]) sweepDue() {
	now := time.Now()
	var late []T
	var none T
	sh.mu.Lock()
	for v := sh.dueHead; v != none && !sh.h.Due(v).After(now); v = sh.dueHead {
		e := sh.h.PollConn(v)
		sh.unlinkDueLocked(v, e)
		if e.parked {
			sh.parked[e.io.fd] = none
			e.parked = false
			sh.gauge.Dec()
			sh.deregisterLocked(e)
			late = append(late, v)
		}
	}
	sh.dueArmed = sh.dueHead != none && !sh.stopping
	if sh.dueArmed {
		sh.dueTimer.Reset(sh.h.Due(sh.dueHead).Sub(now))
	}
	sh.mu.Unlock()
	if len(late) == 0 {
		return
	}
	sh.h.Overdue(late)
}

// Unpark takes v, which is ending, out of the poller if it is parked, and
// reports whether it was: the caller must then start v's reader. Its
// registration is removed, so that the descriptor can be closed and
// reused safely. MayPark(v) must be false already: a shard that takes v
// first (it was readable) serves it and finds it ending; a reader that
// would park it reads on.
func (p *Poller[T]) Unpark(v T) bool {
	e := p.conn(v)
	sh := e.shard
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !e.parked {
		return false
	}
	var none T
	sh.parked[e.io.fd] = none
	e.parked = false
	sh.gauge.Dec()
	sh.unlinkDueLocked(v, e)
	sh.deregisterLocked(e)
	return true
}

// deregisterLocked removes e's descriptor from the epoll set. sh.mu must
// be held. The removal runs under the descriptor's reference (Control): a
// connection closed meanwhile (a failed write closes it from a flusher)
// left the epoll set with its close, and its number may already be
// another session's, which a removal by number would silence.
func (sh *Shard[T]) deregisterLocked(e *Conn[T]) {
	if e.registered && !sh.fdsClosed {
		e.io.unwatch(sh.epfd)
	}
	e.registered = false
}

// IsParked reports whether v is parked.
func (p *Poller[T]) IsParked(v T) bool {
	e := p.conn(v)
	sh := e.shard
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return e.parked
}

// Run waits for the shard's parked connections to become readable and
// serves them (Handler.Serve), until Stop; then it gives the sessions it
// was reading at its pace to Handler.Abandon. It reports why it ended
// when that was not Stop. It works inside the wait's callback, which
// returns only to wait again: between two waits there is one epoll_wait,
// not a second one that finds nothing (see watchEvents).
func (sh *Shard[T]) Run() error {
	ends, others := make([]T, 0, shardEvents), make([]T, 0, shardEvents)
	var err error
	for !sh.quit.Load() {
		// With sessions that have more to read, the wait is bounded: they
		// get their next turn morePace after the last, or with the next
		// event.
		// (A deadline already past would make the wait return at once,
		// before it calls the function: then there is none, and the
		// function takes the turn that is due.)
		next := sh.moreAt.Add(sh.morePace)
		armed := len(sh.more) > 0 && time.Until(next) > 0
		if armed {
			sh.file.SetReadDeadline(next)
		} else {
			sh.file.SetReadDeadline(time.Time{})
		}
		err = sh.ep.Read(func(fd uintptr) bool {
			for {
				if sh.quit.Load() {
					return true
				}
				n := sh.collect(fd)
				sh.serveEvents(n, ends, others)
				if n == len(sh.events) {
					continue // more events may be ready
				}
				if len(sh.more) > 0 {
					if time.Since(sh.moreAt) >= sh.morePace {
						sh.moreAt = time.Now()
						sh.serveMore()
						continue // what came meanwhile first
					}
					if !armed {
						return true // out, to arm the wait's deadline
					}
				}
				return false // wait for the next edge (or the deadline)
			}
		})
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		err = nil
	}
	// Sessions left with more to read are the handler's to end (Stop runs
	// after every session has ended): their readers deliver it.
	for _, v := range sh.more {
		sh.h.Abandon(v)
	}
	sh.more = nil
	if sh.isStopping() {
		return nil
	}
	return err
}

// serveEvents serves the sessions of the shard's first n events: first
// those whose client closed or reset (a holder's close is a handover, and
// its push should not wait behind a turn of heartbeats), then the others.
// ends and others are scratch, as long as the events.
func (sh *Shard[T]) serveEvents(n int, ends, others []T) {
	var none T
	sh.mu.Lock()
	for _, ev := range sh.events[:n] {
		v := sh.parkedAt(ev.Fd)
		if v == none {
			continue // unparked meanwhile (its descriptor is deregistered)
		}
		// The shard has it now: an Unpark no longer finds it parked, and
		// Serve gives it a reader if it must.
		sh.parked[ev.Fd] = none
		sh.h.PollConn(v).parked = false
		if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			ends = append(ends, v)
		} else {
			others = append(others, v)
		}
	}
	sh.mu.Unlock()
	sh.serveAll(ends, true)
	sh.serveAll(others, false)
}

// serveAll serves the sessions in woken, and clears it; ended says that
// their events came with their clients' close (see Handler.Serve).
func (sh *Shard[T]) serveAll(woken []T, ended bool) {
	var none T
	for i, v := range woken {
		woken[i] = none
		sh.after(v, sh.h.Serve(v, ended))
	}
}

// after puts v, just served, in the line of sessions read again at the
// shard's pace if Serve said readAgain.
func (sh *Shard[T]) after(v T, readAgain bool) {
	if !readAgain {
		return
	}
	// Out of the epoll set while the shard reads it on its own: what its
	// client sends meanwhile must not wake the shard (Repark watches it
	// again).
	if e := sh.h.PollConn(v); e.registered {
		sh.mu.Lock()
		sh.deregisterLocked(e)
		sh.mu.Unlock()
	}
	sh.more = append(sh.more, v)
}

// serveMore reads once each of the first moreTurn sessions that may have
// more to read; those that still have go to the back of the line.
func (sh *Shard[T]) serveMore() {
	var none T
	n := min(len(sh.more), sh.moreTurn)
	turn := append(sh.turn[:0], sh.more[:n]...)
	rest := copy(sh.more, sh.more[n:])
	clear(sh.more[rest:])
	sh.more = sh.more[:rest]
	for i, v := range turn {
		turn[i] = none
		sh.after(v, sh.h.Serve(v, false))
	}
	sh.turn = turn[:0]
}

// watchEvents is how a shard watches a connection: edge-triggered, so an
// epoll_wait does not put a returned connection back on the ready list
// (which would cost another epoll_wait, to find it no longer ready).
// Every session the shard keeps parked was read until the socket had no
// more: a read that did not fill its buffer, or EAGAIN.
const watchEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET

// Forget drops v, whose connection its shard's Serve has closed, from the
// shard's books.
func (p *Poller[T]) Forget(v T) {
	e := p.conn(v)
	sh := e.shard
	sh.mu.Lock()
	sh.unlinkDueLocked(v, e)
	e.registered = false // the close takes it out of the epoll set
	sh.mu.Unlock()
	sh.gauge.Dec()
}

// Repark parks v again after its shard's Serve answered it, keeping its
// registration, and reports true. first says that v's first frame has
// come: it leaves the due list. False (its reader must take it) if it
// may not park, if its first frame has not come and its due time has
// been swept, or if its descriptor cannot be watched again.
func (p *Poller[T]) Repark(v T, first bool) bool {
	e := p.conn(v)
	sh := e.shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.mayParkLocked(v) || (!first && !e.inDue) {
		return false
	}
	if first {
		sh.unlinkDueLocked(v, e)
	}
	if !e.registered { // it was read on the shard's own (readAgain)
		ev := unix.EpollEvent{Events: watchEvents, Fd: e.io.fd}
		if err := unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_ADD, int(e.io.fd), &ev); err != nil {
			return false
		}
		e.registered = true
	}
	e.parked = true
	sh.setParked(e.io.fd, v)
	return true
}

// Release takes v, which its shard took out of the parked set, off the
// poller's books (out of the due list and the epoll set), so that the
// caller can give it a reader goroutine.
func (p *Poller[T]) Release(v T) {
	e := p.conn(v)
	sh := e.shard
	sh.mu.Lock()
	sh.unlinkDueLocked(v, e)
	sh.deregisterLocked(e)
	sh.mu.Unlock()
	sh.gauge.Dec()
}

func (sh *Shard[T]) isStopping() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.stopping
}

// Stop makes every shard's Run return and refuses new parks. Every
// session must have been unparked before. Closing a shard's file wakes
// its goroutine; the close waits until the shard's wait has let go of the
// descriptor, and the shard may be serving sessions meanwhile (calling
// the handler), so the caller must hold no lock the handler takes.
func (p *Poller[T]) Stop() {
	for _, sh := range p.shards {
		sh.mu.Lock()
		first := !sh.stopping
		if first {
			sh.stopping, sh.fdsClosed = true, true
			sh.dueTimer.Stop()
		}
		sh.mu.Unlock()
		if first {
			sh.quit.Store(true) // a shard busy with more to read returns at its next turn
			sh.file.Close()
		}
	}
}
