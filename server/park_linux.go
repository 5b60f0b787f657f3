package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/wire"
	"golang.org/x/sys/unix"
)

// idlePoller watches the connections of idle sessions, so that a session
// that sends nothing costs no goroutine (and no goroutine stack, two thirds
// of a session's memory). A parked session's reader goroutine has ended.
// A session parks when its reader finds nothing to read, except on its
// first wait, which stays in Go's poller for Config.ParkAfter: most
// sessions end or change hands sooner, and a park would cost them more
// than it saves.
// When its connection becomes readable, the poller reads it without
// waiting: a lone HEARTBEAT (what a parked session sends, four times a
// lease) is answered right there, the reply written without waiting, and
// the session stays parked; anything else (another frame, part of one, the
// client's close or a reset, a reply the socket cannot take at once) gets
// a new reader goroutine, handed what was read. The server starts a reader
// too when it ends a parked session, or when a waiter queues behind a
// parked holder (a holder with waiters never parks: see contendLocked).
//
// It is one shard per CPU (GOMAXPROCS), each an epoll instance with its
// own goroutine; a session stays in one shard. A registered descriptor is
// level-triggered and stays armed while its session is parked or being
// answered by the shard; it is removed when a reader goroutine takes the
// session over, and added again when that reader parks. So a heartbeat
// costs a read and a write, and no epoll_ctl and no goroutine start.
// Each shard's goroutine waits for its epoll descriptor through Go's
// runtime poller (an epoll descriptor is itself pollable), not in a
// blocking epoll_wait: a wake-up costs what any goroutine's read costs,
// with no thread of its own to wake and no P to win back.
//
// Why not an event-loop library (gnet, nbio): they own every read and
// write of every connection, which would replace net.Conn, crypto/tls and
// the per-session code with theirs. Only idle sessions' heartbeats are
// answered here; every other frame goes through the session's reader.
type idlePoller struct {
	srv    *Server
	shards []*pollShard
	next   atomic.Uint32 // the shard of the next session, round robin
	// handOffs counts the readers started for woken sessions (for tests).
	handOffs atomic.Uint64
}

// pollShard is one epoll instance and the sessions registered with it.
type pollShard struct {
	epfd    int
	file    *os.File        // epfd, registered with Go's poller
	ep      syscall.RawConn // waits for epfd through Go's poller
	srv     *Server
	events  []unix.EpollEvent
	n       int                   // events ready, set by collect
	collect func(fd uintptr) bool // bound once: epoll_wait without waiting

	mu        sync.Mutex
	parked    map[int32]*session // by file descriptor
	stopping  bool               // no new parks
	fdsClosed bool               // epfd is closed
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
		events: make([]unix.EpollEvent, shardEvents), parked: make(map[int32]*session)}
	sh.collect = func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), sh.events, 0)
		for err == unix.EINTR {
			n, err = unix.EpollWait(int(fd), sh.events, 0)
		}
		if err != nil {
			n = 0 // not expected; wait for the next readiness, as with none
		}
		sh.n = n
		return n > 0 // false: Go's poller waits until epfd is readable
	}
	return sh, nil
}

// parkState is a session's part of the poller's bookkeeping; guarded by
// its shard's mutex.
type parkState struct {
	shard      *pollShard // set once, before the session's first park
	registered bool       // in the shard's epoll set, armed
	parked     bool       // no reader goroutine runs; the shard may answer it
}

// park parks c and reports true, after which the caller (c's reader) must
// return without touching the connection. It reports false when c cannot
// be parked (not a plain TCP connection, the session has ended, it holds
// its lock with waiters, or the poller is stopping); the reader then goes
// on reading. Ending a session sets c.closing (and a waiter's arrival sets
// c.contended) before it takes the shard's mutex to unpark, and park reads
// them under that mutex: so either the end finds the session parked and
// wakes it, or the park sees the end; it never needs the server's mutex.
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
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: c.rio.fd}
		if err := unix.EpollCtl(sh.epfd, unix.EPOLL_CTL_ADD, int(c.rio.fd), &ev); err != nil {
			sh.srv.log.Warn("idle poller: cannot watch a connection; its reader stays", "remote", c.remote, "err", err)
			return false
		}
		c.park.registered = true
	}
	c.park.parked = true
	sh.parked[c.rio.fd] = c
	sh.srv.m.parked.Inc()
	return true
}

// mayParkLocked reports whether c may be parked. sh.mu must be held.
func (sh *pollShard) mayParkLocked(c *session) bool {
	return !sh.stopping && !c.closing.Load() && !c.contended.Load()
}

// unparkLocked takes c out of the poller if it is parked, and reports
// whether it was: the caller must then start c's reader. Its registration
// is removed, so that the descriptor can be closed and reused safely.
// c.closing or c.contended must be set already. srv.mu must be held, or
// the caller must start c's reader itself and close the connection if it
// cannot (see Server.wakeAfter).
func (p *idlePoller) unparkLocked(c *session) bool {
	sh := c.park.shard
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !c.park.parked {
		return false
	}
	delete(sh.parked, c.rio.fd)
	c.park.parked = false
	sh.srv.m.parked.Dec()
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
	// pending is a read the poller made and left to the reader it
	// started: the reader takes it first (see takePending).
	pending    bool
	pendingN   int
	pendingErr error
}

// initRaw readies c for parking, if its connection gives its descriptor.
func (c *session) initRaw(tc *net.TCPConn) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
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

// takePending returns the read the poller made before it started this
// reader, if any.
func (c *session) takePending() (n int, err error, ok bool) {
	if !c.rio.pending {
		return 0, nil, false
	}
	n, err = c.rio.pendingN, c.rio.pendingErr
	c.rio.pending, c.rio.pendingN, c.rio.pendingErr = false, 0, nil
	return n, err, true
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
// answers them (see answer), until stop.
func (sh *pollShard) run() {
	woken := make([]*session, 0, shardEvents)
	for {
		if err := sh.ep.Read(sh.collect); err != nil {
			if !sh.isStopping() {
				sh.srv.log.Error("idle poller: waiting on epoll failed; parked sessions are now woken only when the server ends them", "err", err)
			}
			return
		}
		woken = woken[:0]
		sh.mu.Lock()
		for _, ev := range sh.events[:sh.n] {
			c := sh.parked[ev.Fd]
			if c == nil {
				continue // unparked meanwhile (its descriptor is deregistered)
			}
			// The shard has it now: an end or a waiter's arrival no longer
			// finds it parked, and the shard gives it a reader if it must.
			delete(sh.parked, ev.Fd)
			c.park.parked = false
			woken = append(woken, c)
		}
		sh.mu.Unlock()
		for i, c := range woken {
			woken[i] = nil
			if a := c.answer(); a != answered {
				sh.handOff(c, a == needWriter)
			}
		}
	}
}

// What answer did, and what its caller must do.
const (
	answered   = iota // c is parked again
	needReader        // c needs its reader goroutine
	needWriter        // the same, and the reader must first write what is queued
)

// answer handles what woke parked session c, on its shard's goroutine and
// without waiting: a lone HEARTBEAT is answered and c parks again.
// Otherwise the caller must start c's reader, to which answer leaves what
// it read. When the reply cannot be written at once, the reader writes it
// before it reads on (with the io-timeout), as a reader always does: a
// client that does not read its replies cannot make the server queue them.
func (c *session) answer() int {
	s := c.srv
	n, err := c.tryRead(c.hdr[:])
	if err == errWouldBlock { // a stale readiness
		return c.park.shard.repark(c)
	}
	if err != nil || n < wire.HeaderSize || wire.Type(c.hdr[0]) != wire.TypeHeartbeat || c.hdr[1]|c.hdr[2] != 0 {
		c.rio.pending, c.rio.pendingN, c.rio.pendingErr = true, n, err
		return needReader
	}
	now := time.Now()
	s.mu.Lock()
	if c.ended {
		s.mu.Unlock()
		return needReader // the reader delivers the end
	}
	st, ok := s.table.Seen(now, c.id)
	if ok {
		c.queueState(st)
	} else {
		// Too late, as in serveLoop: the session ends now.
		s.settleLocked(now, s.table.Expire(now, s.exits[:0]))
	}
	ended := c.ended
	s.mu.Unlock()
	s.m.heartbeats.Inc()
	if ended {
		return needReader
	}
	if !c.writeNow() {
		return needWriter
	}
	return c.park.shard.repark(c)
}

// repark parks c again after its shard answered it, keeping its
// registration; needReader if it may not park.
func (sh *pollShard) repark(c *session) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.mayParkLocked(c) {
		return needReader
	}
	c.park.parked = true
	sh.parked[c.rio.fd] = c
	return answered
}

// handOff deregisters c, which its shard took out of the parked set, and
// starts its reader, which first writes c's output if flush.
func (sh *pollShard) handOff(c *session, flush bool) {
	sh.mu.Lock()
	sh.deregisterLocked(c)
	sh.mu.Unlock()
	sh.srv.m.parked.Dec()
	sh.srv.poller.handOffs.Add(1)
	sh.srv.wg.Add(1) // the shard's goroutine is counted: above zero
	go func() {
		defer sh.srv.wg.Done()
		if flush {
			c.flush()
		}
		c.resume()
	}()
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
		c.srv.m.handoverTime.Observe(time.Since(pushAt).Seconds())
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
// goroutine; the descriptor is closed once its wait has let go of it.
func (p *idlePoller) stop() {
	for _, sh := range p.shards {
		sh.mu.Lock()
		if !sh.stopping {
			sh.stopping, sh.fdsClosed = true, true
			sh.file.Close()
		}
		sh.mu.Unlock()
	}
}
