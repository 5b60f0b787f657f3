//go:build linux

package rawsock

import (
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Acceptor accepts the connections of a TCP listener with accept4, woken
// through an epoll set of its own that watches only the listener,
// edge-triggered: an *os.File of it waits in the runtime poller, and the
// listener stays net's, so that its Close is still the close.
type Acceptor struct {
	ln          syscall.RawConn // the listener's descriptor
	file        *os.File        // the epoll set
	ep          syscall.RawConn // file's
	eachNoDelay bool            // the listener lacks TCP_NODELAY: each connection gets it
	// accept4 is Accept's call, bound once so that an accept allocates
	// nothing of its own (a closure over Accept's results would escape,
	// through the RawConn interface, at every call): it sets fd, sa and
	// errno.
	accept4 func(lfd uintptr)
	fd      int
	sa      unix.Sockaddr
	errno   error
}

// NewAcceptor watches tl, after setOptions has set on its descriptor the
// options its connections inherit. If tl had no TCP_NODELAY before,
// those already in its backlog have the system's default, so each
// connection gets it, as net would give it: an answer waiting for the ACK
// of the one before it would delay a handover.
func NewAcceptor(tl *net.TCPListener, setOptions func(fd uintptr) error) (*Acceptor, error) {
	lraw, err := tl.SyscallConn()
	if err != nil {
		return nil, err
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	var nodelay int
	var oerr error
	if err := lraw.Control(func(fd uintptr) {
		if nodelay, oerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY); oerr != nil {
			return
		}
		if oerr = setOptions(fd); oerr != nil {
			return
		}
		if oerr = unix.SetNonblock(epfd, true); oerr != nil {
			return
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET}
		oerr = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	}); err != nil || oerr != nil {
		unix.Close(epfd)
		if err == nil {
			err = oerr
		}
		return nil, err
	}
	file := os.NewFile(uintptr(epfd), "accept")
	ep, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, err
	}
	a := &Acceptor{ln: lraw, file: file, ep: ep, eachNoDelay: nodelay == 0}
	a.accept4 = func(lfd uintptr) {
		a.fd, a.sa, a.errno = unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	}
	return a, nil
}

// Close closes the epoll set; the listener is the caller's.
func (a *Acceptor) Close() error { return a.file.Close() }

// SetDeadline bounds the wait of Wait; a time past wakes one waiting.
func (a *Acceptor) SetDeadline(t time.Time) { a.file.SetReadDeadline(t) }

// Wake makes a Wait return at once, with os.ErrDeadlineExceeded.
func (a *Acceptor) Wake() { a.file.SetReadDeadline(time.Now()) }

// Wait calls f, and again whenever f returns false and the listener has
// had a new connection since (or the deadline passed: then Wait returns
// os.ErrDeadlineExceeded); it returns once f returns true. f should
// accept (Accept) until there is none to accept before it asks to wait:
// the wake-ups before the call are forgotten (the runtime poller's
// readiness is reset), so the backlog must be looked at first. The epoll
// set's events are never taken: it watches only the listener, and the
// kernel wakes the runtime poller for each new connection whether or not
// the last one was taken, finding the set readable while the listener
// has a connection to accept.
func (a *Acceptor) Wait(f func(uintptr) bool) error { return a.ep.Read(f) }

// Accept takes one connection waiting on the listener, without waiting:
// its descriptor (non-blocking, close-on-exec) and its address; or the
// errno of accept4 (EAGAIN when none is waiting); or, in closed, the
// error of a listener that is closed. The listener's descriptor is held
// only for the accept4. One goroutine accepts (the accept loop's).
func (a *Acceptor) Accept() (fd int, sa unix.Sockaddr, errno, closed error) {
	a.fd, a.sa, a.errno = -1, nil, nil
	closed = a.ln.Control(a.accept4)
	fd, sa, errno = a.fd, a.sa, a.errno
	a.sa, a.errno = nil, nil
	return fd, sa, errno, closed
}

// RefuseOne accepts a waiting connection and closes it at once; false if
// none was waiting.
func (a *Acceptor) RefuseOne() bool {
	refused := false
	a.ln.Control(func(fd uintptr) {
		if nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC); err == nil {
			unix.Close(nfd)
			refused = true
		}
	})
	return refused
}

// Conn makes the connection of descriptor fd, from address sa, that
// Accept took. Its options came from the listener (TCP_NODELAY set on it
// too if the listener's did not give it).
func (a *Acceptor) Conn(fd int, sa unix.Sockaddr) *Conn {
	if a.eachNoDelay {
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	return newConn(fd, sa)
}

// newConn is the connection of accepted descriptor fd, from sa.
func newConn(fd int, sa unix.Sockaddr) *Conn { return &Conn{fd: fd, remote: sockaddrTCP(sa)} }
