package server

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The accept loop of a plain TCP listener, when the idle poller runs,
// takes connections with accept4 itself rather than through
// net.Listener.Accept. A session that the poller's shard serves never
// waits in Go's runtime poller, so what net's accept adds to every
// connection is for nothing there: its registration with the runtime
// poller and its removal at the close (two epoll_ctl), a getsockname, a
// TCP_NODELAY setsockopt (the listener gives it instead: Linux copies it
// to the connections it accepts, see listenerOptions), a netFD and its
// finalizer. The connection is a sockConn, which hands its descriptor to
// an *os.File, and so to the runtime poller, only when a reader goroutine
// first waits on it.

// serveRaw accepts on ln as Serve does, with accept4 (see above). It
// reports false, having accepted nothing, when it cannot run: the server
// speaks TLS, there is no idle poller, ln is not a TCP listener, or its
// options could not be set once on it (then every connection needs its
// own, which net's accept gives).
func (s *Server) serveRaw(ln net.Listener) (bool, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok || s.poller == nil || s.cfg.TLS != nil {
		return false, nil
	}
	lraw, err := tl.SyscallConn()
	if err != nil {
		return false, nil
	}
	// A listener from Listen has its options from before it listened, so
	// that every connection inherits them. Another one gets them now, and
	// its connections TCP_NODELAY each, as net would give them: those in
	// its backlog already have the system's default, and an answer
	// waiting for the ACK of the one before it would delay a handover.
	//
	// An epoll set of its own watches the listener, edge-triggered: an
	// *os.File of it waits in the runtime poller, as the shards do, and
	// the listener stays net's, so that its Close is still the close.
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return false, nil
	}
	var nodelay int
	var oerr error
	if err := lraw.Control(func(fd uintptr) {
		if nodelay, oerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY); oerr != nil {
			return
		}
		if oerr = listenerOptions(fd, s.cfg); oerr != nil {
			return
		}
		if oerr = unix.SetNonblock(epfd, true); oerr != nil {
			return
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET}
		oerr = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	}); err != nil || oerr != nil {
		unix.Close(epfd)
		return false, nil
	}
	eachNoDelay := nodelay == 0
	file := os.NewFile(uintptr(epfd), "accept")
	defer file.Close()
	ep, err := file.SyscallConn()
	if err != nil {
		return false, nil
	}
	// Shutdown closes ln and then wakes this loop through the deadline.
	s.mu.Lock()
	s.listeners[ln] = func() { file.SetReadDeadline(time.Now()) }
	s.mu.Unlock()

	var backoff time.Duration
	for {
		if s.closing.Load() {
			return true, ErrServerClosed
		}
		// Someone else's close of ln takes it out of the epoll set without
		// a word: the deadline makes the loop look (Shutdown wakes it at
		// once).
		file.SetReadDeadline(time.Now().Add(s.acceptCheck))
		var lnErr, acceptErr error
		// Each Read begins with an accept, not a wait: Read forgets a
		// wake-up that came before it (the runtime poller's readiness is
		// reset), so the backlog must be looked at first. The epoll set's
		// events are never taken: it watches only ln, and the kernel wakes
		// the runtime poller for each new connection whether or not the
		// last one was taken, finding the set readable while ln has a
		// connection to accept.
		werr := ep.Read(func(uintptr) bool {
			for {
				var nfd int
				var sa unix.Sockaddr
				var err error
				// The listener's descriptor is held only for the accept4:
				// Shutdown closes ln with the server's mutex held, and the
				// close waits for it.
				s.fds.gate.RLock() // not while the server's own spares are lent out (fdreserve.go)
				cerr := lraw.Control(func(fd uintptr) {
					nfd, sa, err = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
				})
				s.fds.gate.RUnlock()
				if cerr != nil {
					lnErr = cerr
					return true
				}
				switch err {
				case nil:
					backoff = 0
					s.fds.topUp()
					s.acceptSock(nfd, sa, eachNoDelay)
				case unix.EAGAIN:
					return false // wait for the next connection
				case unix.EINTR, unix.ECONNABORTED:
				case unix.EMFILE, unix.ENFILE:
					if s.fds.spend(err) { // a spare for this one
						continue
					}
					// None left but the server's own: refused at the door.
					switch refused, lent := s.refuseAtDoor(func() bool { return refuseRaw(lraw) }); {
					case refused:
						continue
					case lent:
						return false // none waits: wait for the next connection
					}
					acceptErr = &net.OpError{Op: "accept", Net: "tcp", Addr: ln.Addr(), Err: os.NewSyscallError("accept4", err)}
					return true
				default:
					acceptErr = &net.OpError{Op: "accept", Net: "tcp", Addr: ln.Addr(), Err: os.NewSyscallError("accept4", err)}
					return true
				}
			}
		})
		switch {
		case s.closing.Load():
			return true, ErrServerClosed
		case lnErr != nil:
			return true, &net.OpError{Op: "accept", Net: "tcp", Addr: ln.Addr(), Err: net.ErrClosed}
		case acceptErr != nil:
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "err", acceptErr, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.done:
				return true, ErrServerClosed
			}
		case werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded):
			// The epoll set failed; net's accept takes over.
			s.log.Warn("raw accept stopped; accepting through net", "err", werr)
			return false, nil
		}
		// The deadline: the next accept looks at the listener.
	}
}

// refuseRaw accepts a waiting connection of lraw and closes it at once;
// false if none was waiting.
func refuseRaw(lraw syscall.RawConn) bool {
	refused := false
	lraw.Control(func(fd uintptr) {
		if nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC); err == nil {
			unix.Close(nfd)
			refused = true
		}
	})
	return refused
}

// acceptSock takes connection fd, from address sa, as Serve's loop takes
// one from net's accept. Its options came from the listener; noDelay sets
// TCP_NODELAY on it too.
func (s *Server) acceptSock(fd int, sa unix.Sockaddr, noDelay bool) {
	if noDelay {
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	var conn net.Conn = &sockConn{fd: fd, remote: sockaddrTCP(sa)}
	if conn = s.admit(conn); conn != nil { // per-address cap (no TLS here)
		s.accept(conn)
	}
}

// tcpRawConn is conn's descriptor if conn is a plain TCP connection,
// net's or serveRaw's; nil otherwise.
func tcpRawConn(conn net.Conn) syscall.RawConn {
	switch tc := conn.(type) {
	case *sockConn:
		return tc.rawConn()
	case *net.TCPConn:
		if raw, err := tc.SyscallConn(); err == nil {
			return raw
		}
	}
	return nil
}

// sockaddrTCP is sa as a *net.TCPAddr, as net's accept gives it.
func sockaddrTCP(sa unix.Sockaddr) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)))
	case *unix.SockaddrInet6:
		ip := netip.AddrFrom16(sa.Addr)
		if sa.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(sa.ZoneId)); err == nil {
				ip = ip.WithZone(ifi.Name)
			}
		}
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(sa.Port)))
	}
	return &net.TCPAddr{}
}

// setLingerZero makes the close of conn, a connection serveRaw accepted,
// a TCP reset; false for any other connection.
func setLingerZero(conn net.Conn) bool {
	sc, ok := conn.(*sockConn)
	if !ok {
		return false
	}
	sc.rawConn().Control(func(fd uintptr) {
		unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	})
	return true
}

// sockConn is a TCP connection accepted by serveRaw. While no goroutine
// has waited on it, its descriptor is used without waiting (Control, and
// Read and Write whose function does not ask to wait) and is counted by
// users, so that a Close meanwhile is carried out by the last of them,
// and the number cannot be reused under a write still running (the
// handover's push is written from another session's goroutine). The
// first blocking Read or Write, deadline, or RawConn wait hands the
// descriptor to an *os.File (pollable), which registers it with Go's
// runtime poller and owns it from then on: Close then closes the file.
type sockConn struct {
	remote net.Addr

	mu     sync.Mutex
	fd     int
	users  int  // running uses of fd outside file
	closed bool // Close was called; the last user closes fd
	file   *os.File
	fraw   syscall.RawConn // file's
}

// enter counts a use of the descriptor, or returns file's RawConn to use
// instead, or net.ErrClosed.
func (sc *sockConn) enter() (syscall.RawConn, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case sc.closed:
		return nil, net.ErrClosed
	case sc.fraw != nil:
		return sc.fraw, nil
	}
	sc.users++
	return nil, nil
}

// leave ends a use counted by enter, closing the descriptor if it was the
// last one after a Close.
func (sc *sockConn) leave() {
	sc.mu.Lock()
	sc.users--
	last := sc.closed && sc.users == 0
	sc.mu.Unlock()
	if last {
		sc.closeFD()
	}
}

func (sc *sockConn) closeFD() error {
	if sc.file != nil { // set before closed, under mu, and never again
		return sc.file.Close()
	}
	return unix.Close(sc.fd)
}

// pollable hands the descriptor to an *os.File, once, and returns it and
// its RawConn.
func (sc *sockConn) pollable() (*os.File, syscall.RawConn, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.closed {
		return nil, nil, net.ErrClosed
	}
	if sc.file == nil {
		f := os.NewFile(uintptr(sc.fd), "tcp") // non-blocking: registered with the runtime poller
		raw, err := f.SyscallConn()
		if err != nil { // not expected of an *os.File
			return nil, nil, err
		}
		sc.file, sc.fraw = f, raw
	}
	return sc.file, sc.fraw, nil
}

// opError wraps err of file's op as net's connections do, so that callers
// see the same errors (net.ErrClosed, os.ErrDeadlineExceeded, an Errno
// inside an *os.SyscallError, io.EOF bare).
func (sc *sockConn) opError(op string, err error) error {
	if err == nil {
		return nil
	}
	pe, ok := err.(*fs.PathError) // what *os.File returns; no reflection
	if !ok {
		if err == net.ErrClosed {
			return &net.OpError{Op: op, Net: "tcp", Addr: sc.remote, Err: err}
		}
		return err // io.EOF
	}
	inner := pe.Err
	switch e := inner.(type) {
	case syscall.Errno:
		inner = os.NewSyscallError(op, e)
	default:
		if inner == os.ErrClosed {
			inner = net.ErrClosed
		}
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: sc.remote, Err: inner}
}

func (sc *sockConn) Read(b []byte) (int, error) { return sc.fileIO("read", b, (*os.File).Read) }

func (sc *sockConn) Write(b []byte) (int, error) { return sc.fileIO("write", b, (*os.File).Write) }

// fileIO is Read's and Write's: op of the file, which may wait.
func (sc *sockConn) fileIO(op string, b []byte, do func(*os.File, []byte) (int, error)) (int, error) {
	f, _, err := sc.pollable()
	if err != nil {
		return 0, sc.opError(op, err)
	}
	n, err := do(f, b)
	return n, sc.opError(op, err)
}

// Close closes the connection; if a use of the descriptor is running, its
// end closes it.
func (sc *sockConn) Close() error {
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		return &net.OpError{Op: "close", Net: "tcp", Addr: sc.remote, Err: net.ErrClosed}
	}
	sc.closed = true
	last := sc.users == 0
	sc.mu.Unlock()
	if !last {
		return nil
	}
	return sc.opError("close", sc.closeFD())
}

// CloseWrite half-closes: the client reads a FIN after what was written.
func (sc *sockConn) CloseWrite() error {
	var err error
	if cerr := sc.rawConn().Control(func(fd uintptr) { err = unix.Shutdown(int(fd), unix.SHUT_WR) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return &net.OpError{Op: "close", Net: "tcp", Addr: sc.remote, Err: os.NewSyscallError("shutdown", err)}
	}
	return nil
}

func (sc *sockConn) RemoteAddr() net.Addr { return sc.remote }

// LocalAddr asks the kernel each time: the server never asks, so the
// accept does not.
func (sc *sockConn) LocalAddr() net.Addr {
	var sa unix.Sockaddr
	sc.rawConn().Control(func(fd uintptr) { sa, _ = unix.Getsockname(int(fd)) })
	return sockaddrTCP(sa)
}

func (sc *sockConn) SetDeadline(t time.Time) error { return sc.setDeadline(t, (*os.File).SetDeadline) }

func (sc *sockConn) SetReadDeadline(t time.Time) error {
	return sc.setDeadline(t, (*os.File).SetReadDeadline)
}

func (sc *sockConn) SetWriteDeadline(t time.Time) error {
	return sc.setDeadline(t, (*os.File).SetWriteDeadline)
}

// setDeadline sets a deadline of the file: only a file can wait.
func (sc *sockConn) setDeadline(t time.Time, set func(*os.File, time.Time) error) error {
	f, _, err := sc.pollable()
	if err != nil {
		return sc.opError("set", err)
	}
	return sc.opError("set", set(f, t))
}

// rawConn is sc's descriptor as a syscall.RawConn (see sockConn).
func (sc *sockConn) rawConn() syscall.RawConn { return (*sockRaw)(sc) }

// SyscallConn gives the descriptor, as net's connections do.
func (sc *sockConn) SyscallConn() (syscall.RawConn, error) { return sc.rawConn(), nil }

// sockRaw is a sockConn's syscall.RawConn.
type sockRaw sockConn

func (r *sockRaw) Control(f func(fd uintptr)) error {
	fraw, _, err := (*sockConn)(r).direct(func(fd uintptr) bool { f(fd); return true })
	if fraw != nil {
		return fraw.Control(f)
	}
	return err
}

// Read calls f on the descriptor; if f asks to wait (returns false), the
// descriptor becomes pollable and the file's RawConn waits and calls f
// again.
func (r *sockRaw) Read(f func(fd uintptr) bool) error {
	return r.use(f, func(raw syscall.RawConn) error { return raw.Read(f) })
}

// Write is Read's counterpart for writing.
func (r *sockRaw) Write(f func(fd uintptr) bool) error {
	return r.use(f, func(raw syscall.RawConn) error { return raw.Write(f) })
}

func (r *sockRaw) use(f func(fd uintptr) bool, wait func(syscall.RawConn) error) error {
	sc := (*sockConn)(r)
	fraw, done, err := sc.direct(f)
	switch {
	case err != nil:
		return err
	case fraw != nil:
		return wait(fraw)
	case done:
		return nil
	}
	if _, fraw, err = sc.pollable(); err != nil {
		return err
	}
	return wait(fraw)
}

// direct calls f on the descriptor as a counted use (see sockConn), and
// returns what f returned; or, once the descriptor is the file's, the
// file's RawConn without calling f; or net.ErrClosed.
func (sc *sockConn) direct(f func(fd uintptr) bool) (fraw syscall.RawConn, done bool, err error) {
	if fraw, err = sc.enter(); err != nil || fraw != nil {
		return fraw, false, err
	}
	defer sc.leave()
	return nil, f(uintptr(sc.fd)), nil
}
