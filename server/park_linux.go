package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// idlePoller watches the connections of idle sessions, so that a session
// that sends nothing costs no goroutine (and no goroutine stack, two thirds
// of a session's memory). A parked session's reader goroutine has ended;
// the poller starts a new one when the connection becomes readable (a
// frame, the client's close or a reset), and the server starts one when it
// ends the session itself.
//
// It is one epoll instance in level-triggered, one-shot mode: a
// connection reported once is disarmed until it parks again, so a wake-up
// and a park can never overlap. Go's own poller keeps the descriptor too;
// the two do not interfere, since a parked session has no pending read.
// The poller's goroutine waits for its epoll descriptor through Go's
// runtime poller (an epoll descriptor is itself pollable), not in a
// blocking epoll_wait: a wake-up then costs what any goroutine's read
// costs, with no thread of its own to wake and no P to win back, which
// would double the latency of a handover from a parked holder.
//
// Why not an event-loop library (gnet, nbio): they own every read and
// write of every connection, which would replace net.Conn, crypto/tls and
// the per-session code with theirs. Only "tell me when this idle socket is
// readable" is needed here.
type idlePoller struct {
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

func newIdlePoller(s *Server) (*idlePoller, error) {
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
	p := &idlePoller{epfd: epfd, file: file, ep: ep, srv: s,
		events: make([]unix.EpollEvent, 256), parked: make(map[int32]*session)}
	p.collect = func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), p.events, 0)
		for err == unix.EINTR {
			n, err = unix.EpollWait(int(fd), p.events, 0)
		}
		if err != nil {
			n = 0 // not expected; wait for the next readiness, as with none
		}
		p.n = n
		return n > 0 // false: Go's poller waits until epfd is readable
	}
	return p, nil
}

// parkState is a session's part of the poller's bookkeeping; guarded by
// idlePoller.mu.
type parkState struct {
	fd         int32 // -1 until the connection is first registered
	registered bool  // in the epoll set (armed or disarmed)
	parked     bool  // armed; no reader goroutine runs
}

// park arms c's connection and reports true, after which the caller (c's
// reader) must return without touching the connection. It reports false
// when c cannot be parked (not a plain TCP connection, the session has
// ended, it holds its lock with waiters, or the poller is stopping); the
// reader then goes on reading. Ending a session sets c.closing (and a
// waiter's arrival sets c.contended) before it takes p.mu to unpark, and
// park reads them under p.mu: so either the end finds the session parked
// and wakes it, or the park sees the end; it never needs the server's
// mutex.
func (p *idlePoller) park(c *session) bool {
	if c.raw == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping || c.closing.Load() || c.contended.Load() {
		return false
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: c.rio.fd}
	op := unix.EPOLL_CTL_MOD
	if !c.park.registered {
		op = unix.EPOLL_CTL_ADD
	}
	if err := unix.EpollCtl(p.epfd, op, int(c.rio.fd), &ev); err != nil {
		p.srv.log.Warn("idle poller: cannot watch a connection; its reader stays", "remote", c.remote, "err", err)
		return false
	}
	c.park = parkState{fd: c.rio.fd, registered: true, parked: true}
	p.parked[c.rio.fd] = c
	p.srv.m.parked.Inc()
	return true
}

// unparkLocked takes c out of the poller if it is parked, and reports
// whether it was: the caller must then start c's reader. Its registration
// is removed, so that the descriptor can be closed and reused safely.
// c.closing or c.contended must be set already. srv.mu must be held.
func (p *idlePoller) unparkLocked(c *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !c.park.parked {
		return false
	}
	p.forgetLocked(c)
	return true
}

// forgetLocked removes c from the parked set and the epoll set. p.mu must
// be held.
func (p *idlePoller) forgetLocked(c *session) {
	delete(p.parked, c.park.fd)
	c.park.parked = false
	p.srv.m.parked.Dec()
	if c.park.registered && !p.fdsClosed {
		// The connection is still open (only the reader closes it, and
		// there is none while parked), so fd is still c's.
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(c.park.fd), nil)
		c.park.registered = false
	}
}

// errWouldBlock says that a session has nothing to read now.
var errWouldBlock = errors.New("nothing to read")

// rawIO is what a session needs to read and park without allocating:
// its descriptor and a read callback bound once.
type rawIO struct {
	fd    int32
	read  func(fd uintptr) bool // reads into buf, sets n and errno
	buf   []byte
	n     int
	errno error
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

// run waits for parked connections to become readable and starts their
// readers, until stop. It is one of the server's goroutines.
func (p *idlePoller) run() {
	var woken []*session
	for {
		if err := p.ep.Read(p.collect); err != nil {
			if !p.isStopping() {
				p.srv.log.Error("idle poller: waiting on epoll failed; parked sessions are now woken only when the server ends them", "err", err)
			}
			return
		}
		woken = woken[:0]
		p.mu.Lock()
		for _, ev := range p.events[:p.n] {
			c := p.parked[ev.Fd]
			if c == nil {
				continue
			}
			// One-shot: the descriptor is disarmed already; it stays
			// registered so the next park is a cheap MOD.
			delete(p.parked, ev.Fd)
			c.park.parked = false
			p.srv.m.parked.Dec()
			woken = append(woken, c)
		}
		p.mu.Unlock()
		if len(woken) == 0 {
			continue
		}
		// This goroutine becomes the first woken session's reader, and a
		// new one takes over the polling: the frame (often a close, a
		// handover) is read without waiting for another goroutine to be
		// scheduled, which after an idle spell can cost a CPU's wake-up.
		// The poller is one of the server's goroutines, so the WaitGroup
		// is above zero and may grow without s.mu.
		p.srv.wg.Add(len(woken))
		go p.runCounted()
		for _, c := range woken[1:] {
			go p.resume(c)
		}
		woken[0].resume()
		return
	}
}

// runCounted is run in a goroutine counted in the server's WaitGroup by
// the caller.
func (p *idlePoller) runCounted() {
	defer p.srv.wg.Done()
	p.run()
}

func (p *idlePoller) isStopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

// resume runs c's reader, counted in the server's WaitGroup by the caller.
func (p *idlePoller) resume(c *session) {
	defer p.srv.wg.Done()
	c.resume()
}

// stop makes run return and refuses new parks. Every session was unparked
// before (Shutdown ends them all first). Closing the file wakes run; the
// descriptor is closed once run's wait has let go of it.
func (p *idlePoller) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return
	}
	p.stopping, p.fdsClosed = true, true
	p.file.Close()
}

// isParked reports whether c is parked here.
func (p *idlePoller) isParked(c *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.park.parked
}
