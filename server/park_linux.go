package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"golang.org/x/sys/unix"
)

// idlePoller serves sessions without goroutines of their own, so that a
// session costs no goroutine stack (two thirds of its memory) and a claim
// no goroutine start: a parked session has no reader goroutine, and its
// shard reads it when its connection becomes readable, without waiting.
// A connection parks at its accept (accepted with accept4 by the listener's
// loop, so that Go's runtime poller never sees it unless a reader
// goroutine waits on it: see sock_linux.go). Its shard takes the ACQUIRE,
// when it came whole in one read (answerFirst); answers its HEARTBEATs,
// pipelined ones too, a read of them a turn and at its pace (answerNext,
// serveMore); and ends the session at the client's close or reset,
// writing the handover's push to the next holder (closeInShard). The
// reply is written without waiting, and the session stays parked.
// Anything else (a frame begun and not continued, another frame after the
// ACQUIRE, a lease NoteLease may have to wait for, a refusal, a reply the
// socket cannot take at once) gets a new reader
// goroutine, handed what was read; it parks the session again once idle,
// after its first wait (Config.ParkAfter). The server starts a reader too
// when it ends a parked session, which delivers the ERROR. An adopted
// connection that sends no whole ACQUIRE within io-timeout is handed to a
// reader at its due time, which ends it as a reader started at accept
// would (sweepDue).
//
// A holder with waiters stays parked: its close wakes its shard through
// the same readiness that would wake a reader goroutine, and the shard
// writes the push at once, with no goroutine start and no epoll_ctl.
//
// It is one shard per CPU (GOMAXPROCS), each an epoll instance with its
// own goroutine; a session stays in one shard. A registered descriptor is
// edge-triggered (watchEvents) and stays armed while its session is parked
// or being answered by the shard; it is removed when a reader goroutine
// takes the session over, and added again when that reader parks. So a
// heartbeat costs a read and a write, and no epoll_ctl and no goroutine
// start. Each shard's goroutine waits for its epoll descriptor through
// Go's runtime poller (an epoll descriptor is itself pollable), not in a
// blocking epoll_wait: a wake-up costs what any goroutine's read costs,
// with no thread of its own to wake and no P to win back.
//
// Why not an event-loop library (gnet, nbio): they own every read and
// write of every connection, which would replace net.Conn, crypto/tls and
// the per-session code with theirs. Here a session keeps its net.Conn,
// and a reader goroutine with the ordinary blocking code takes over
// whenever the shard's fast path does not apply; TLS sessions never park.
type idlePoller struct {
	srv    *Server
	shards []*pollShard
	next   atomic.Uint32 // the shard of the next session, round robin
	// handOffs counts the readers started for woken sessions (for tests).
	handOffs atomic.Uint64
}

// pollShard is one epoll instance and the sessions registered with it.
type pollShard struct {
	epfd   int
	file   *os.File        // epfd, registered with Go's poller
	ep     syscall.RawConn // waits for epfd through Go's poller
	srv    *Server
	events []unix.EpollEvent
	// rbuf is what the shard reads a parked session's frames into: a usual
	// ACQUIRE whole, and larger than a HEARTBEAT, so that a read returning
	// one alone has drained the socket (see watchEvents).
	rbuf [firstReadSize]byte
	// more are the sessions the shard serves that may have more frames
	// unread (pipelined HEARTBEATs, see answerNext), oldest first: each is
	// read once a turn, beside the sessions that epoll reports. Only the
	// shard's goroutine touches it.
	more []*session
	turn []*session // serveMore's scratch
	// moreAt is when the shard last took a turn of more.
	moreAt time.Time
	// quit is set by stop: the shard's goroutine returns at its next turn.
	quit atomic.Bool

	mu        sync.Mutex
	parked    []*session // by file descriptor; nil where none is parked (see setParked)
	stopping  bool       // no new parks
	fdsClosed bool       // epfd is closed
	// due lists the adopted sessions whose ACQUIRE has not come, oldest
	// first (all have the same io-timeout, so also by firstDue); dueTimer
	// hands them to readers when it passes, which then end them with
	// READ_TIMEOUT (see sweepDue). Armed while due is not empty.
	dueHead, dueTail *session
	dueTimer         *time.Timer
	dueArmed         bool
}

// shardEvents bounds the events one shard handles in a turn, and so how
// long a heartbeat can wait behind others of the same shard.
const shardEvents = 128

func newIdlePoller(s *Server) (*idlePoller, error) {
	p := &idlePoller{srv: s}
	for range max(runtime.GOMAXPROCS(0), 1) {
		sh, err := newPollShard(s)
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

func newPollShard(s *Server) (*pollShard, error) {
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
	sh := &pollShard{epfd: epfd, file: file, ep: ep, srv: s,
		events: make([]unix.EpollEvent, shardEvents)}
	sh.dueTimer = time.AfterFunc(time.Hour, sh.sweepDue)
	sh.dueTimer.Stop()
	return sh, nil
}

// collect takes the ready events of the shard's epoll descriptor fd
// without waiting, and returns how many there are.
func (sh *pollShard) collect(fd uintptr) int {
	n, err := unix.EpollWait(int(fd), sh.events, 0)
	for err == unix.EINTR {
		n, err = unix.EpollWait(int(fd), sh.events, 0)
	}
	if err != nil {
		return 0 // not expected; wait for the next readiness, as with none
	}
	return n
}

// parkState is a session's part of the poller's bookkeeping; guarded by
// its shard's mutex.
type parkState struct {
	shard      *pollShard // set once, before the session's first park
	registered bool       // in the shard's epoll set, armed
	parked     bool       // no reader goroutine runs; the shard may answer it
	// inDue: in the shard's due list; dueNext and duePrev link it.
	inDue            bool
	dueNext, duePrev *session
}

// park parks c and reports true, after which the caller (c's reader) must
// return without touching the connection. It reports false when c cannot
// be parked (not a plain TCP connection, the session has ended, or the
// poller is stopping); the reader then goes on reading. Ending a session
// sets c.closing before it takes the shard's mutex to unpark, and park
// reads it under that mutex: so either the end finds the session parked
// and wakes it, or the park sees the end; it never needs the server's
// mutex.
func (p *idlePoller) park(c *session) bool {
	sh := c.park.shard
	if c.raw == nil || sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.mayParkLocked(c) {
		return false
	}
	if !c.park.registered {
		ev := unix.EpollEvent{Events: watchEvents, Fd: c.rio.fd}
		if err := unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_ADD, int(c.rio.fd), &ev); err != nil {
			sh.srv.log.Warn("idle poller: cannot watch a connection; its reader stays", "remote", c.remote, "err", err)
			return false
		}
		c.park.registered = true
	}
	c.park.parked = true
	sh.setParked(c.rio.fd, c)
	sh.srv.m.parked.Inc()
	return true
}

// setParked records c as parked on descriptor fd. Descriptors are small
// and dense, so a slice indexed by them is cheaper than a map; it grows to
// the largest descriptor parked. sh.mu must be held.
func (sh *pollShard) setParked(fd int32, c *session) {
	if int(fd) >= len(sh.parked) {
		sh.parked = append(sh.parked, make([]*session, int(fd)+1-len(sh.parked))...)
	}
	sh.parked[fd] = c
}

// parkedAt returns the session parked on descriptor fd, or nil. sh.mu must
// be held.
func (sh *pollShard) parkedAt(fd int32) *session {
	if fd < 0 || int(fd) >= len(sh.parked) {
		return nil
	}
	return sh.parked[fd]
}

// mayParkLocked reports whether c may be parked. sh.mu must be held.
func (sh *pollShard) mayParkLocked(c *session) bool {
	return !sh.stopping && !c.closing.Load()
}

// adopt parks new session c before its first frame, so that its shard
// reads the ACQUIRE and serves the session without a goroutine of its own,
// and reports true. False if it cannot (the poller is stopping, the
// session has ended, the descriptor cannot be watched): the caller then
// starts c's reader.
func (p *idlePoller) adopt(c *session) bool {
	sh := c.park.shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.mayParkLocked(c) {
		return false
	}
	ev := unix.EpollEvent{Events: watchEvents, Fd: c.rio.fd}
	if err := unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_ADD, int(c.rio.fd), &ev); err != nil {
		return false
	}
	c.firstDue = time.Now().Add(sh.srv.cfg.IOTimeout)
	c.park.registered, c.park.parked = true, true
	sh.setParked(c.rio.fd, c)
	sh.srv.m.parked.Inc()
	// Linked last: its due time is the latest.
	c.park.inDue, c.park.duePrev = true, sh.dueTail
	if sh.dueTail != nil {
		sh.dueTail.park.dueNext = c
	} else {
		sh.dueHead = c
	}
	sh.dueTail = c
	if !sh.dueArmed {
		sh.dueArmed = true
		sh.dueTimer.Reset(sh.srv.cfg.IOTimeout)
	}
	return true
}

// unlinkDueLocked takes c out of the due list. sh.mu must be held.
func (sh *pollShard) unlinkDueLocked(c *session) {
	if !c.park.inDue {
		return
	}
	prev, next := c.park.duePrev, c.park.dueNext
	if prev != nil {
		prev.park.dueNext = next
	} else {
		sh.dueHead = next
	}
	if next != nil {
		next.park.duePrev = prev
	} else {
		sh.dueTail = prev
	}
	c.park.inDue, c.park.duePrev, c.park.dueNext = false, nil, nil
}

// sweepDue runs on dueTimer: the adopted sessions whose ACQUIRE has not
// come within io-timeout get readers, which find their deadline passed
// and end them with READ_TIMEOUT, as a reader started at accept would.
// A session the shard is serving just now leaves the list too; the shard
// gives it a reader when it finds it still without ACQUIRE (repark).
func (sh *pollShard) sweepDue() {
	s := sh.srv
	now := time.Now()
	var late []*session
	sh.mu.Lock()
	for c := sh.dueHead; c != nil && !c.firstDue.After(now); c = sh.dueHead {
		sh.unlinkDueLocked(c)
		if c.park.parked {
			sh.parked[c.rio.fd] = nil
			c.park.parked = false
			s.m.parked.Dec()
			sh.deregisterLocked(c)
			late = append(late, c)
		}
	}
	sh.dueArmed = sh.dueHead != nil && !sh.stopping
	if sh.dueArmed {
		sh.dueTimer.Reset(sh.dueHead.firstDue.Sub(now))
	}
	sh.mu.Unlock()
	if len(late) == 0 {
		return
	}
	s.mu.Lock()
	for _, c := range late {
		if !s.goLocked(c.resume) {
			c.conn.Close() // stopped: its end found it unparked already
		}
	}
	s.mu.Unlock()
}

// unpark takes c, which the server ended, out of the poller if it is
// parked, and reports whether it was: the caller must then start c's
// reader. Its registration is removed, so that the descriptor can be
// closed and reused safely. c.closing must be set already: a shard that
// takes c first (it was readable) finds the session ended and starts its
// reader itself; a reader that would park it sees closing and reads on.
func (p *idlePoller) unpark(c *session) bool {
	sh := c.park.shard
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !c.park.parked {
		return false
	}
	sh.parked[c.rio.fd] = nil
	c.park.parked = false
	sh.srv.m.parked.Dec()
	sh.unlinkDueLocked(c)
	sh.deregisterLocked(c)
	return true
}

// deregisterLocked removes c's descriptor from the epoll set. sh.mu must
// be held. The removal runs under the descriptor's reference (Control): a
// connection closed meanwhile (a failed write closes it from a flusher)
// left the epoll set with its close, and its number may already be
// another session's, which a removal by number would silence.
func (sh *pollShard) deregisterLocked(c *session) {
	if c.park.registered && !sh.fdsClosed {
		c.raw.Control(func(fd uintptr) {
			unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
		})
	}
	c.park.registered = false
}

// readersStarted is how many readers the shards started for woken sessions.
func (p *idlePoller) readersStarted() uint64 { return p.handOffs.Load() }

// isParked reports whether c is parked.
func (p *idlePoller) isParked(c *session) bool {
	sh := c.park.shard
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return c.park.parked
}

// errWouldBlock says that a session has nothing to read now.
var errWouldBlock = errors.New("nothing to read")

// rawIO is what a session needs to read, write and park without
// allocating: its descriptor and callbacks bound once.
type rawIO struct {
	fd    int32
	read  func(fd uintptr) bool // reads into buf, sets n and errno
	buf   []byte
	n     int
	errno error
	write func(fd uintptr) // writes wbuf, sets wn and werr
	wbuf  []byte
	wn    int
	werr  error
}

// initRaw readies c for parking, if its connection gives its descriptor.
func (c *session) initRaw(raw syscall.RawConn) {
	fd := int32(-1)
	if err := raw.Control(func(d uintptr) { fd = int32(d) }); err != nil || fd < 0 {
		return
	}
	// The descriptor stays c's while it is used: park runs on the reader,
	// the only goroutine that closes the connection of a session not yet
	// ended, and ended sessions do not park.
	c.raw = raw
	c.rio.fd = fd
	c.rio.read = func(fd uintptr) bool {
		for {
			c.rio.n, c.rio.errno = unix.Read(int(fd), c.rio.buf)
			if c.rio.errno != unix.EINTR {
				return true // never let Go's poller wait: parking is ours
			}
		}
	}
	c.rio.write = func(fd uintptr) {
		for { // the socket is non-blocking: this never waits
			c.rio.wn, c.rio.werr = unix.Write(int(fd), c.rio.wbuf)
			if c.rio.werr != unix.EINTR {
				return
			}
		}
	}
	p := c.srv.poller
	c.park.shard = p.shards[int(p.next.Add(1))%len(p.shards)]
}

// tryRead reads what c's connection has, without waiting: errWouldBlock if
// nothing, io.EOF at the client's close.
func (c *session) tryRead(b []byte) (int, error) {
	c.rio.buf = b
	err := c.raw.Read(c.rio.read)
	n, errno := c.rio.n, c.rio.errno
	c.rio.buf, c.rio.errno = nil, nil
	switch {
	case err != nil: // closed, or a deadline passed (the session is ending)
		return 0, err
	case errno == unix.EAGAIN:
		return 0, errWouldBlock
	case errno != nil:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// run runs every shard, until stop. It is one of the server's goroutines;
// the other shards run in goroutines it starts, counted likewise.
func (p *idlePoller) run() {
	p.srv.wg.Add(len(p.shards) - 1) // the caller is counted: above zero
	for _, sh := range p.shards[1:] {
		go func() {
			defer p.srv.wg.Done()
			sh.run()
		}()
	}
	p.shards[0].run()
}

// run waits for the shard's parked connections to become readable and
// answers them (see answer), until stop. It works inside the wait's
// callback, which returns only to wait again: between two waits there is
// one epoll_wait, not a second one that finds nothing (see watchEvents).
func (sh *pollShard) run() {
	ends, others := make([]*session, 0, shardEvents), make([]*session, 0, shardEvents)
	var err error
	for !sh.quit.Load() {
		// With sessions that have more to read, the wait is bounded: they
		// get their next turn morePace after the last, or with the next
		// event.
		// (A deadline already past would make the wait return at once,
		// before it calls the function: then there is none, and the
		// function takes the turn that is due.)
		next := sh.moreAt.Add(morePace)
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
					if time.Since(sh.moreAt) >= morePace {
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
	// Sessions left with more to read are the server's to end (stop runs
	// after every session has ended): their readers deliver it.
	for _, c := range sh.more {
		sh.handOff(c, c.resume)
	}
	sh.more = nil
	if !sh.isStopping() {
		sh.srv.log.Error("idle poller: waiting on epoll failed; parked sessions are now woken only when the server ends them", "err", err)
	}
}

// serveEvents answers the sessions of the shard's first n events: first
// those whose client closed or reset (a holder's close is a handover, and
// its push should not wait behind a turn of heartbeats), then the others.
// ends and others are scratch, as long as the events.
func (sh *pollShard) serveEvents(n int, ends, others []*session) {
	sh.mu.Lock()
	for _, ev := range sh.events[:n] {
		c := sh.parkedAt(ev.Fd)
		if c == nil {
			continue // unparked meanwhile (its descriptor is deregistered)
		}
		// The shard has it now: an end no longer finds it parked, and the
		// shard gives it a reader if it must.
		sh.parked[ev.Fd] = nil
		c.park.parked = false
		if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			ends = append(ends, c)
		} else {
			others = append(others, c)
		}
	}
	sh.mu.Unlock()
	sh.answerAll(ends, true)
	sh.answerAll(others, false)
}

// answerAll answers the sessions in woken, and clears it; ended says
// that their events came with their clients' close (see answer).
func (sh *pollShard) answerAll(woken []*session, ended bool) {
	for i, c := range woken {
		woken[i] = nil
		sh.after(c, c.answer(ended))
	}
}

// after does what answer's result a says must be done for c.
func (sh *pollShard) after(c *session, a int) {
	switch a {
	case needReader:
		sh.handOff(c, c.resume)
	case needWriter:
		sh.handOff(c, c.flushResume)
	case readAgain:
		// Out of the epoll set while the shard reads it on its own: what
		// its client sends meanwhile must not wake the shard (repark
		// watches it again).
		if c.park.registered {
			sh.mu.Lock()
			sh.deregisterLocked(c)
			sh.mu.Unlock()
		}
		sh.more = append(sh.more, c)
	}
}

// serveMore reads once each of the first moreTurn sessions that may have
// more to read; those that still have go to the back of the line.
func (sh *pollShard) serveMore() {
	n := min(len(sh.more), moreTurn)
	turn := append(sh.turn[:0], sh.more[:n]...)
	rest := copy(sh.more, sh.more[n:])
	clear(sh.more[rest:])
	sh.more = sh.more[:rest]
	for i, c := range turn {
		turn[i] = nil
		sh.after(c, c.answer(false))
	}
	sh.turn = turn[:0]
}

// watchEvents is how a shard watches a connection: edge-triggered, so an
// epoll_wait does not put a returned connection back on the ready list
// (which would cost another epoll_wait, to find it no longer ready).
// Every session the shard keeps parked was read until the socket had no
// more: a read that did not fill its buffer, or EAGAIN.
const watchEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET

// What answer did, and what its caller must do.
const (
	answered   = iota // c is parked again
	closed            // c has ended, and its connection is closed
	handedOff         // c has a reader goroutine already
	needReader        // c needs its reader goroutine
	needWriter        // the same, and the reader must first write what is queued
	parkAgain         // (answerFirst, answerNext) c may park again
	readAgain         // (answerNext) c has more unread, maybe: its shard reads it again in its next turn
)

// answer handles what woke parked session c, on its shard's goroutine and
// without waiting: the ACQUIRE of an adopted session (answerFirst); a lone
// HEARTBEAT, answered; the client's close or reset, the session's end
// (closeInShard). Otherwise the caller must start c's reader, to which
// answer leaves what it read. When the reply cannot be written at once,
// the reader writes it before it reads on (with the io-timeout), as a
// reader always does: a client that does not read its replies cannot make
// the server queue them.
//
// ended says that the event came with the client's close or reset (or a
// socket error): what came before it is answered, and then the socket is
// read once more, for the close. Edge-triggered, the shard is not told of
// the close again: parked with its close unread, a holder would keep its
// lock until its lease ran out.
func (c *session) answer(ended bool) int {
	for {
		var a int
		if c.started {
			a = c.answerNext()
		} else {
			a = c.answerFirst()
		}
		if a != parkAgain {
			return a // readAgain too: the close, if it came, is read after the frames
		}
		if !ended {
			return c.park.shard.repark(c)
		}
		ended = false
	}
}

// pipelineRead is how much of a started session's socket its shard reads
// in a turn: whole HEARTBEATs (42), and more than one, so that a read
// that returns less has drained the socket (see watchEvents).
const pipelineRead = firstReadSize / wire.HeaderSize * wire.HeaderSize

// answerNext reads a started session's socket and answers the HEARTBEATs
// it finds, or ends the session at the client's close or reset. Pipelined
// HEARTBEATs (a client may send many without waiting) are answered here
// too, a read of them a turn, in one hold of the server's mutex and one
// write: a session whose read filled the buffer, or ended inside a frame,
// is read again in a later turn of its shard (readAgain, serveMore), at
// the shard's pace. So whatever one client sends, the others' heartbeats
// wait for at most moreTurn reads, and a flood costs no goroutine and no
// write per frame. A frame begun and not continued by the next turn goes
// to a reader goroutine, which waits for the rest within io-timeout.
func (c *session) answerNext() int {
	sh := c.park.shard
	have := copy(sh.rbuf[:], c.extra) // a frame's first bytes, from the last turn
	c.extra = c.extra[:0]
	buf := sh.rbuf[:pipelineRead]
	n, err := c.tryRead(buf[have:])
	if err == errWouldBlock {
		if have == 0 {
			return parkAgain // a stale readiness
		}
		c.extra = append(c.extra, buf[:have]...)
		return needReader
	}
	if err == io.EOF || err == unix.ECONNRESET {
		if c.closeInShard(err) {
			return closed
		}
	}
	if err != nil {
		c.extra = append(c.extra, buf[:have]...)
		c.readErr = err
		return needReader
	}
	total := have + n
	whole := total / wire.HeaderSize * wire.HeaderSize
	if !heartbeatsOnly(buf[:whole]) {
		c.extra = append(c.extra, buf[:total]...) // nextHeader takes it first
		return needReader
	}
	if whole > 0 && !c.heartbeats(whole/wire.HeaderSize) {
		return needReader // the reader delivers the end
	}
	c.extra = append(c.extra, buf[whole:total]...)
	if !c.writeNow() {
		return needWriter // its reader then takes the frame begun first
	}
	if total == len(buf) || len(c.extra) > 0 {
		return readAgain
	}
	return parkAgain
}

// heartbeatsOnly reports whether b is whole HEARTBEAT frames, or nothing.
func heartbeatsOnly(b []byte) bool {
	if len(b)%wire.HeaderSize != 0 {
		return false
	}
	for i := 0; i < len(b); i += wire.HeaderSize {
		if wire.Type(b[i]) != wire.TypeHeartbeat || b[i+1]|b[i+2] != 0 {
			return false
		}
	}
	return true
}

// answerFirst takes the ACQUIRE of an adopted session, when it came whole
// in one read and nothing came after it (what clients send): the session
// enters the table, its answer is written without waiting, and it stays
// parked. Anything else goes to a reader goroutine, with what was read:
// a frame in parts, more than one frame, an error to report, a lease that
// noting would wait for (a disk write or a Raft round, which the shard must
// not wait for: see Replica.TryNoteLease), a refusal (its ERROR and linger).
func (c *session) answerFirst() int {
	buf := c.park.shard.rbuf[:]
	n, err := c.tryRead(buf)
	if err == errWouldBlock { // a stale readiness
		return parkAgain
	}
	if err != nil {
		c.readErr = err
		return needReader
	}
	h, payload, used, serr := wire.Split(buf[:n])
	if serr != nil || used != n || n == len(buf) || h.Type != wire.TypeAcquire {
		c.extra = append([]byte(nil), buf[:n]...)
		return needReader
	}
	req, derr := wire.DecodeAcquireUpTo(payload, wire.Version3)
	if derr != nil || req.Resuming() {
		// A refusal, or a resume: a resume may wait (for the bound's
		// commit, for a server about to serve), which the shard must not.
		c.extra = append([]byte(nil), buf[:n]...)
		return needReader
	}
	c.started, c.waited = true, true
	reason, msg, ok, wouldWait := c.acquire(req, false)
	if wouldWait { // a reader takes the ACQUIRE again, and may wait
		c.started, c.waited = false, false
		c.extra = append([]byte(nil), buf[:n]...)
		return needReader
	}
	if !ok {
		c.park.shard.handOff(c, func() { c.end(reason, msg) })
		return handedOff
	}
	if !c.writeNow() {
		return needWriter
	}
	return parkAgain
}

// closeInShard ends c, whose client closed or reset its connection (err),
// on its shard's goroutine: the handover's pushes are written without
// waiting (a new holder whose socket cannot take its push at once gets a
// flusher), and the connection is closed. False if the server ended c
// meanwhile: its reader must then deliver that end.
func (c *session) closeInShard(err error) bool {
	s := c.srv
	reason, _ := c.readFailure(err, false)
	s.mu.Lock()
	if c.ended {
		s.mu.Unlock()
		return false
	}
	fx := effects{flush: c.endFlush[:0], self: c}
	s.endOneLocked(s.now(), c, reason, "", &fx) // no ERROR: nothing for c
	s.mu.Unlock()
	s.deliver(&fx)
	c.park.shard.forget(c)
	c.conn.Close()
	s.m.connections.Dec()
	s.open.Add(-1)
	return true
}

// forget drops c, which its shard has closed, from the shard's books.
func (sh *pollShard) forget(c *session) {
	sh.mu.Lock()
	sh.unlinkDueLocked(c)
	c.park.registered = false // the close takes it out of the epoll set
	sh.mu.Unlock()
	sh.srv.m.parked.Dec()
}

// repark parks c again after its shard answered it, keeping its
// registration; needReader if it may not park, or if it still has no
// ACQUIRE and its due time has been swept (its reader ends it).
func (sh *pollShard) repark(c *session) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.mayParkLocked(c) || (!c.started && !c.park.inDue) {
		return needReader
	}
	if c.started {
		sh.unlinkDueLocked(c)
	}
	if !c.park.registered { // it was read on the shard's own (readAgain)
		ev := unix.EpollEvent{Events: watchEvents, Fd: c.rio.fd}
		if err := unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_ADD, int(c.rio.fd), &ev); err != nil {
			return needReader
		}
		c.park.registered = true
	}
	c.park.parked = true
	sh.setParked(c.rio.fd, c)
	return answered
}

// handOff deregisters c, which its shard took out of the parked set, and
// starts a goroutine that runs f as c's reader.
func (sh *pollShard) handOff(c *session, f func()) {
	sh.mu.Lock()
	sh.unlinkDueLocked(c)
	sh.deregisterLocked(c)
	sh.mu.Unlock()
	sh.srv.m.parked.Dec()
	sh.srv.poller.handOffs.Add(1)
	sh.srv.wg.Add(1) // the shard's goroutine is counted: above zero
	go func() {
		defer sh.srv.wg.Done()
		f()
	}()
}

// flushResume is the reader of a session whose answer the shard could not
// write at once: it writes it, then reads on.
func (c *session) flushResume() {
	c.flush()
	c.resume()
}

// writeNow writes c's queued output without waiting, and reports whether
// nothing is left for its reader: it all went out, or another goroutine is
// writing (it takes this too). False when the socket cannot take it all
// now, or the output ends the session: flush must finish it.
func (c *session) writeNow() bool {
	c.wmu.Lock()
	if c.flushing || c.dead || (len(c.out) == 0 && !c.finish) {
		c.wmu.Unlock()
		return true
	}
	if c.finish {
		c.wmu.Unlock()
		return false // flush half-closes after it
	}
	buf := c.out
	c.out, c.spare = c.spare[:0], nil
	pushAt := c.pushAt
	c.pushAt = time.Time{}
	c.flushing = true
	c.wmu.Unlock()

	// Control, not Write: Write would refuse once the write deadline of an
	// earlier flush has passed, and waits are not wanted anyway. Control
	// keeps the descriptor open meanwhile; writes are serialized by
	// c.flushing, not by the descriptor's write lock.
	c.rio.wbuf, c.rio.wn, c.rio.werr = buf, 0, nil
	err := c.raw.Control(c.rio.write)
	n, werr := c.rio.wn, c.rio.werr
	c.rio.wbuf, c.rio.werr = nil, nil

	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.flushing = false
	if err != nil || werr != nil || n < len(buf) {
		// Back in front of what was queued meanwhile; the reader's flush
		// writes it with a deadline and deals with any error.
		if err != nil || werr != nil {
			n = 0 // a failed write(2) writes nothing (and returns -1)
		}
		c.out = append(append([]byte(nil), buf[n:]...), c.out...)
		if !pushAt.IsZero() {
			c.pushAt = pushAt
		}
		return false
	}
	if !pushAt.IsZero() {
		c.srv.m.handoverTime.Observe(c.srv.now().Sub(pushAt).Seconds())
	}
	c.spare = buf[:0]
	return len(c.out) == 0 && !c.finish
}

func (sh *pollShard) isStopping() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.stopping
}

// stop makes run return and refuses new parks. Every session was unparked
// before (Shutdown ends them all first). Closing a shard's file wakes its
// goroutine; the close waits until the shard's wait has let go of the
// descriptor, and the shard may be serving sessions meanwhile (taking
// srv.mu and its own mutex), so the caller must hold neither.
func (p *idlePoller) stop() {
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
