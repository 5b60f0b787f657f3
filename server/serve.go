package server

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// Serve accepts sessions on ln until Shutdown, and then returns
// ErrServerClosed. Temporary accept errors (such as running out of file
// descriptors) are retried with a backoff of up to one second. If ln is
// closed by its owner instead, Serve returns an error wrapping
// net.ErrClosed: at once, or within a second when it accepts with accept4
// itself (a plain TCP listener with the idle poller on Linux, see
// accept_raw_linux.go), whose wait is not told of another's close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopped || s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = nil
	s.reaperOnce.Do(func() {
		s.goLocked(s.reap)
		if s.cfg.Resume != nil {
			s.goLocked(s.rotate)
		}
		s.startPollerLocked()
	})
	s.mu.Unlock()
	if s.cfg.TCPFastOpen {
		s.enableFastOpen(ln) // fastopen_linux.go
	}
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	if raw, err := s.serveRaw(ln); raw { // accept_raw_linux.go
		return err
	}

	// Options the accepted sockets inherit are set on the listener once.
	preset := s.cfg.SendBuffer == 0 || presetListener(ln, s.cfg)
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			if s.fds.spend(err) { // out of descriptors: a spare for this one
				continue
			}
			// None left but the server's own: refused at the door, if the
			// listener can be asked without waiting (else, and when none
			// waits, the backoff).
			if tl, ok := ln.(*net.TCPListener); ok && outOfFDs(err) {
				if refused, _ := s.refuseAtDoor(func() bool { return refuseTCP(tl) }); refused {
					continue
				}
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.done:
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		s.fds.topUp()
		if tc, ok := conn.(*net.TCPConn); ok && !preset {
			tc.SetWriteBuffer(s.cfg.SendBuffer) // best effort: the default only costs memory
		}
		if conn = s.admit(conn); conn != nil { // per-address cap, TLS (security.go)
			s.accept(conn)
		}
	}
}

// refuseTCP accepts a connection waiting on tl and closes it at once;
// false if none came within a millisecond.
func refuseTCP(tl *net.TCPListener) bool {
	tl.SetDeadline(time.Now().Add(time.Millisecond))
	c, err := tl.Accept()
	tl.SetDeadline(time.Time{})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// startPollerLocked starts the idle poller, unless parking is off. Without
// it every session keeps its reader goroutine, which is correct, only
// larger. mu must be held.
func (s *Server) startPollerLocked() {
	if !s.cfg.ParkIdle {
		return
	}
	p, err := newIdlePoller(s)
	if err != nil {
		s.log.Warn("idle sessions keep their goroutines", "err", err)
		return
	}
	if p == nil {
		return // not available on this platform
	}
	s.poller = p
	s.goLocked(p.run)
}

// connsHoldersFirstLocked is every open connection, the holders of
// version 3 first, then the other holders, then the rest: a planned stop
// tells those whose deadlines run first. mu must be held.
func (s *Server) connsHoldersFirstLocked(now time.Time) []*session {
	var first, holders, rest []*session
	for c := range s.conns {
		held := false
		if c.inTable {
			in, ok := s.table.Session(now, c.id)
			held = ok && in.Held
		}
		switch {
		case held && c.v3 != nil:
			first = append(first, c)
		case held:
			holders = append(holders, c)
		default:
			rest = append(rest, c)
		}
	}
	return append(append(first, holders...), rest...)
}

// accept registers conn and gives it to the idle poller, whose shard reads
// its ACQUIRE, or starts its reader; or closes it at once when the server
// is shutting down or flooded far past its session limit.
func (s *Server) accept(conn net.Conn) {
	s.mu.Lock()
	if int(s.open.Load()) >= s.maxConns {
		s.mu.Unlock()
		if !s.roomForOne() { // a TLS handshake in progress cut for it (tlsgate.go)
			s.m.refusedConns.Inc()
			conn.Close() // no ERROR: reading the ACQUIRE would cost a goroutine per flooding connection
			return
		}
		s.mu.Lock()
	}
	s.nextID++
	c := newSession(s, s.nextID, conn)
	if s.stopped {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.m.connections.Inc()
	s.open.Add(1)
	if !c.poll.Bound() {
		s.wg.Add(1)
		go s.serveSession(c) // not goLocked: a go statement with arguments allocates no closure
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.poller.adopt(c) { // outside mu: it costs an epoll_ctl
		return
	}
	s.mu.Lock()
	if !s.goLocked(c.serve) { // stopped: its end found it unparked already
		c.conn.Close()
		s.m.connections.Dec()
		s.open.Add(-1)
	}
	s.mu.Unlock()
}

// serveSession is a session's first reader, one of the server's goroutines
// (see goLocked).
func (s *Server) serveSession(c *session) {
	defer s.wg.Done()
	c.serve()
}

// Shutdown stops the server: Ready turns false, the listeners close, every
// session is told ERROR SHUTDOWN and closed, and Shutdown waits under ctx
// for every goroutine of the server to end. If ctx ends first, the
// remaining connections are closed abruptly and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(s.stop)
	idle := make(chan struct{})
	go func() { // ends when the last server goroutine has ended
		s.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for _, c := range s.stopping {
			if c.version == wire.Version3 {
				resetConn(c.conn) // no clean end: its client must not resume on it
				continue
			}
			c.conn.Close()
		}
		s.mu.Unlock()
		<-idle
		return ctx.Err()
	}
}

// stop is the first part of Shutdown, done once: refuse new work, tell
// every session, and let no new goroutine start.
func (s *Server) stop() {
	s.closing.Store(true)
	s.mu.Lock()
	for ln, wake := range s.listeners {
		ln.Close()
		if wake != nil {
			wake()
		}
	}
	now := s.now()
	// With version 3, a planned handover to the next start: the claims are
	// listed at this instant, when confirmations stop (closing is set, and
	// every session ends below in this hold of mu).
	if s.cfg.Resume != nil && s.serving.Load() {
		s.list = s.takeListLocked(now)
	}
	// closing is set, so no waiter is pushed ACQUIRED on its way out.
	all := s.connsHoldersFirstLocked(now)
	for _, c := range all {
		s.endLocked(now, c, ReasonShutdown, "server shutting down")
	}
	s.startMu.Lock()
	s.stopped = true
	s.startMu.Unlock()
	s.events.wakeLocked() // readers then see ErrSubscriptionClosed
	s.stopping = all
	s.mu.Unlock()
	if s.poller != nil {
		s.poller.stop() // every session was unparked by its end above
	}
	s.reaperOnce.Do(func() {}) // a Serve after this does not start the reaper
	s.fds.close()
	close(s.done)
	s.stopCancel()
}
