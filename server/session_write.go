package server

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/locktable"
)

// queueState queues the reply to a frame: ACQUIRED (same token) or WAITING.
// srv.mu must be held.
func (c *session) queueState(st locktable.State) {
	c.wmu.Lock()
	if c.v3 != nil {
		c.appendStateV3(st, false)
	} else if st.Held {
		c.out = wire.AppendAcquired(c.out, false, st.Token)
	} else {
		c.out = wire.AppendWaiting(c.out, uint32(st.Position))
	}
	c.wmu.Unlock()
}

// queueAcquired queues the promotion push; handoverAt is when the previous
// holder's session ended. srv.mu must be held.
func (c *session) queueAcquired(push bool, token uint64, handoverAt time.Time) {
	c.wmu.Lock()
	if c.v3 != nil {
		// A grant's credential: always with it.
		a := wire.Acquired{Push: push, Token: token}
		if cred, gen, ok := c.credentialIf(true, true, token); ok {
			a.WithCredential, a.Generation, a.Credential = true, gen, cred
		}
		c.out = wire.AppendAcquiredV3(c.out, a)
	} else {
		c.out = wire.AppendAcquired(c.out, push, token)
	}
	c.pushAt = handoverAt
	c.wmu.Unlock()
}

// queueError queues the session's last frame; after it is written the
// connection is half-closed. srv.mu must be held.
func (c *session) queueError(code wire.Code, msg string) {
	c.wmu.Lock()
	c.out = wire.AppendError(c.out, code, msg)
	c.finish = true
	c.wmu.Unlock()
}

// send writes what is queued: at once, without a deadline or a wait, when
// the socket takes it all (a reply or a push nearly always fits), and
// otherwise by flush.
func (c *session) send() {
	if !c.poll.Bound() || !c.writeNow() {
		c.flush()
	}
}

// flush writes what is queued, unless another goroutine already is (it will
// write this too). Each write must complete within io-timeout; one that
// does not ends the session without an ERROR.
func (c *session) flush() {
	c.wmu.Lock()
	if c.flushing || c.dead {
		c.wmu.Unlock()
		return
	}
	c.flushing = true
	for len(c.out) > 0 {
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		pushAt := c.pushAt
		c.pushAt = time.Time{}
		c.wmu.Unlock()

		c.conn.SetWriteDeadline(time.Now().Add(c.srv.cfg.IOTimeout))
		_, err := c.conn.Write(buf)
		if err == nil && !pushAt.IsZero() {
			c.srv.m.handoverTime.Observe(c.srv.now().Sub(pushAt).Seconds())
		}

		c.wmu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.dead = true
			c.flushing = false
			c.wmu.Unlock()
			c.writeFailed(err)
			return
		}
	}
	c.flushing = false
	finish := c.finish
	if finish {
		c.finish = false
		c.dead = true
	}
	c.wmu.Unlock()
	if finish {
		c.halfClose()
	}
}

// writeFailed ends the session after a failed write and closes the socket,
// which also wakes the reader.
func (c *session) writeFailed(err error) {
	reason := ReasonReset
	switch cause := ioCause(err); {
	case cause == os.ErrDeadlineExceeded:
		reason = ReasonWriteTimeout
	case cause == syscall.ECONNRESET || cause == syscall.EPIPE:
		// The client reset its socket: it closed, as far as a planned
		// handover's drain is concerned (the close then ends drain's read).
		c.markPeerGone()
	}
	s := c.srv
	// End first, close after: the reader, woken by the close, must find the
	// session ended for this reason rather than record it as closed.
	var fx effects
	s.mu.Lock()
	s.endOneLocked(s.now(), c, reason, "", &fx)
	s.mu.Unlock()
	s.deliver(&fx)
	if c.version == wire.Version3 {
		// The ERROR could not be written: a reset, never a clean end of
		// the stream, which a client of version 3 would take for its
		// server's going away (and resume).
		resetConn(c.conn)
		return
	}
	c.conn.Close()
}

// resetConn closes conn with a TCP reset (SO_LINGER 0) where it can reach
// the TCP connection under it, else closes it.
func resetConn(conn net.Conn) {
	for nc := conn; nc != nil; {
		switch x := nc.(type) {
		case *net.TCPConn:
			x.SetLinger(0)
			nc = nil
		case *tls.Conn:
			nc = x.NetConn()
		case interface{ Unwrap() net.Conn }:
			nc = x.Unwrap()
		default:
			setLingerZero(nc)
			nc = nil
		}
	}
	conn.Close()
}

// markPeerGone tells EndTerm's drain, if it waits for this session, that
// the client has closed its socket.
func (c *session) markPeerGone() {
	if c.peerGone != nil {
		c.peerGoneOnce.Do(func() { close(c.peerGone) })
	}
}

// halfClose follows the session's ERROR with a FIN and makes the reader stop
// within the linger time. Closing outright while client frames are unread
// would send a RST, which can destroy the ERROR before the client reads it.
func (c *session) halfClose() {
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	until := time.Now().Add(c.srv.linger)
	c.wmu.Lock()
	c.lingerUntil = until
	c.wmu.Unlock()
	c.conn.SetReadDeadline(until)
}

// drain waits, after a session that ends with an ERROR, until the ERROR is
// written and the client has closed or the linger deadline set by halfClose
// has passed (a failed write closes the socket instead). What the client
// still sends is discarded unprocessed. srv.mu must have been taken since
// the session ended.
func (c *session) drain() {
	if c.reason.code() == 0 {
		return // the client left, or its socket failed: nothing to deliver
	}
	// The reader may have replaced or cleared halfClose's deadline while it
	// finished a frame begun before the ERROR (readHeader sets and clears
	// its own); without this, a client that then neither reads nor closes
	// would keep this goroutine forever. If halfClose has not run yet, it
	// sets the deadline itself: nothing clears it once the reader is here.
	c.wmu.Lock()
	until := c.lingerUntil
	c.wmu.Unlock()
	if !until.IsZero() {
		c.conn.SetReadDeadline(until)
	}
	var buf [256]byte
	for {
		if _, err := c.conn.Read(buf[:]); err != nil {
			// EOF or a reset: the client closed its socket (the clients
			// release by reset, and one may release just as the ERROR
			// comes), so it no longer believes it holds. See EndTerm.
			if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
				c.markPeerGone()
			}
			return
		}
	}
}
