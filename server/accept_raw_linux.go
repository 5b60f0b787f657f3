package server

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/batonlock/baton/server/internal/rawsock"
	"golang.org/x/sys/unix"
)

// The accept loop of a plain TCP listener, when the idle poller runs,
// takes connections with accept4 itself rather than through
// net.Listener.Accept (server/internal/rawsock): a session that the
// poller's shard serves never waits in Go's runtime poller, so what net's
// accept adds to every connection would be for nothing there. A
// connection is a *rawsock.Conn, which reaches the runtime poller only
// when a reader goroutine first waits on it.

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
	// A listener from Listen has its options from before it listened, so
	// that every connection inherits them. Another one gets them now, and
	// its connections TCP_NODELAY each (see rawsock.NewAcceptor).
	acc, err := rawsock.NewAcceptor(tl, func(fd uintptr) error { return listenerOptions(fd, s.cfg) })
	if err != nil {
		return false, nil
	}
	defer acc.Close()
	// Shutdown closes ln and then wakes this loop through the deadline.
	s.mu.Lock()
	s.listeners[ln] = acc.Wake
	s.mu.Unlock()

	var backoff time.Duration
	for {
		if s.closing.Load() {
			return true, ErrServerClosed
		}
		// Someone else's close of ln takes it out of the epoll set without
		// a word: the deadline makes the loop look (Shutdown wakes it at
		// once).
		acc.SetDeadline(time.Now().Add(s.acceptCheck))
		var lnErr, acceptErr error
		// Each wait begins with an accept (see rawsock.Acceptor.Wait).
		werr := acc.Wait(func(uintptr) bool {
			for {
				// The listener's descriptor is held only for the accept4:
				// Shutdown closes ln with the server's mutex held, and the
				// close waits for it.
				s.fds.gate.RLock() // not while the server's own spares are lent out (fdreserve.go)
				nfd, sa, err, cerr := acc.Accept()
				s.fds.gate.RUnlock()
				if cerr != nil {
					lnErr = cerr
					return true
				}
				switch err {
				case nil:
					backoff = 0
					s.fds.topUp()
					s.acceptSock(acc.Conn(nfd, sa))
				case unix.EAGAIN:
					return false // wait for the next connection
				case unix.EINTR, unix.ECONNABORTED:
				case unix.EMFILE, unix.ENFILE:
					if s.fds.spend(err) { // a spare for this one
						continue
					}
					// None left but the server's own: refused at the door.
					switch refused, lent := s.refuseAtDoor(acc.RefuseOne); {
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

// acceptSock takes conn, which serveRaw accepted, as Serve's loop takes
// one from net's accept.
func (s *Server) acceptSock(conn *rawsock.Conn) {
	if conn := s.admit(conn); conn != nil { // per-address cap (no TLS here)
		s.accept(conn)
	}
}

// tcpRawConn is conn's descriptor if conn is a plain TCP connection,
// net's or serveRaw's; nil otherwise.
func tcpRawConn(conn net.Conn) syscall.RawConn {
	var raw syscall.RawConn
	var err error
	switch tc := conn.(type) {
	case *rawsock.Conn:
		raw, err = tc.SyscallConn()
	case *net.TCPConn:
		raw, err = tc.SyscallConn()
	}
	if err != nil {
		return nil
	}
	return raw
}

// setLingerZero makes the close of conn, a connection serveRaw accepted,
// a TCP reset; false for any other connection.
func setLingerZero(conn net.Conn) bool {
	sc, ok := conn.(*rawsock.Conn)
	if !ok {
		return false
	}
	sc.ResetOnClose()
	return true
}
