package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/server/internal/idlepoll"
)

// errWouldBlock says that a session has nothing to read now.
var errWouldBlock = idlepoll.ErrWouldBlock

// firstReadSize is the first read's buffer: a header and a usual ACQUIRE
// payload (names and owners are mostly short) in one read.
const firstReadSize = 128

// readFirst reads the first frame, most often in one read into buf. It
// returns its payload only for an ACQUIRE (the caller refuses any other
// frame). What the client sent after the frame (a HEARTBEAT sent before
// the answer came) is kept in c.extra for nextHeader. What the poller's
// shard read before it handed the session on (c.extra, c.readErr) comes
// first.
func (c *session) readFirst(buf []byte) (wire.Header, []byte, error) {
	if err := c.takeReadErr(); err != nil {
		return wire.Header{}, nil, err
	}
	n := copy(buf, c.extra) // the shard reads at most len(buf)
	c.extra = nil
	if n < wire.HeaderSize {
		m, err := io.ReadAtLeast(c.conn, buf[n:], wire.HeaderSize-n)
		n += m
		if err != nil {
			if err == io.EOF && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return wire.Header{}, nil, err
		}
	}
	h, err := wire.ParseHeader(buf)
	if err != nil || h.Type != wire.TypeAcquire {
		return h, nil, err
	}
	end := wire.HeaderSize + int(h.Length)
	if end > len(buf) { // a long payload: n < end
		payload := make([]byte, h.Length)
		got := copy(payload, buf[wire.HeaderSize:n])
		if _, err := io.ReadFull(c.conn, payload[got:]); err != nil {
			return h, nil, err
		}
		return h, payload, nil
	}
	if n < end {
		if _, err := io.ReadFull(c.conn, buf[n:end]); err != nil {
			return h, nil, err
		}
	} else if n > end {
		c.extra = append([]byte(nil), buf[end:n]...)
	}
	return h, buf[wire.HeaderSize:end], nil
}

// takeReadErr returns c.readErr (see there) and clears it.
func (c *session) takeReadErr() error {
	err := c.readErr
	c.readErr = nil
	return err
}

// errEnded says that the server ended the session while its reader waited.
var errEnded = errors.New("session ended by the server")

// nextHeader waits for the next frame's header. Waiting for a frame's first
// byte has no deadline (silence is the lease's business). With an idle
// poller, a session with nothing to read parks instead: parked is then true
// and the caller must return without touching the connection.
func (c *session) nextHeader() (h wire.Header, parked bool, err error) {
	s := c.srv
	if len(c.extra) > 0 { // sent with the ACQUIRE (readFirst), or read by the poller's shard
		n := copy(c.hdr[:], c.extra)
		c.extra = c.extra[n:]
		h, err = c.finishHeader(n, nil, false)
		return h, false, err
	}
	if !c.poll.Bound() {
		h, err = c.readHeader(false)
		return h, false, err
	}
	var n int
	err = c.takeReadErr() // what the poller's read found before it started this reader
	switch {
	case err != nil:
	case !c.waited:
		c.waited = true
		n, err = c.firstWait()
	default:
		n, err = c.poll.TryRead(c.hdr[:])
	}
	if err == errWouldBlock {
		if s.poller.park(c) {
			return h, true, nil
		}
		if c.closing.Load() {
			return h, false, errEnded
		}
		n, err = c.conn.Read(c.hdr[:])
	}
	h, err = c.finishHeader(n, err, false)
	return h, false, err
}

// firstWait waits for the session's first frame after ACQUIRE in Go's
// runtime poller, for at most Config.ParkAfter (see there), and then reads
// without waiting: errWouldBlock if the session is still idle and should
// park.
func (c *session) firstWait() (int, error) {
	after := c.srv.cfg.ParkAfter
	if after <= 0 {
		return 0, errWouldBlock
	}
	c.conn.SetReadDeadline(time.Now().Add(after))
	n, err := c.conn.Read(c.hdr[:])
	idle := err != nil && ioCause(err) == os.ErrDeadlineExceeded
	if err == nil || idle {
		// A later blocking read (drain's among them) must not inherit the
		// deadline. If the server ended the session meanwhile, clearing
		// halfClose's deadline is harmless: drain sets it again.
		c.conn.SetReadDeadline(time.Time{})
	}
	if !idle {
		return n, err // a frame, or the client's close or reset
	}
	if c.closing.Load() {
		return 0, errEnded
	}
	return c.poll.TryRead(c.hdr[:]) // idle: park, unless something came just now
}

// readHeader reads one frame header. Once its first byte has arrived, the
// rest of the frame must follow within io-timeout. For the first frame the
// caller has set the deadline already; for the others there is none while
// the first byte is awaited.
func (c *session) readHeader(first bool) (wire.Header, error) {
	n, err := c.conn.Read(c.hdr[:])
	return c.finishHeader(n, err, first)
}

// finishHeader completes a header of which a read got n bytes (or err).
func (c *session) finishHeader(n int, err error, first bool) (wire.Header, error) {
	if err != nil {
		return wire.Header{}, err
	}
	if n < len(c.hdr) {
		if !first {
			c.conn.SetReadDeadline(time.Now().Add(c.srv.cfg.IOTimeout))
		}
		if _, err := io.ReadFull(c.conn, c.hdr[n:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return wire.Header{}, err
		}
		if !first {
			c.conn.SetReadDeadline(time.Time{})
		}
	}
	return wire.ParseHeader(c.hdr[:])
}

// readFailure classifies a failed read. It ends every session, so it looks
// through the errors the reads return by type, not by errors.As and
// errors.Is, which go through reflection.
func (c *session) readFailure(err error, first bool) (EndReason, string) {
	err = ioCause(err)
	if we, ok := err.(*wire.Error); ok {
		return ReasonProtocolError, we.Msg
	}
	switch err {
	case os.ErrDeadlineExceeded:
		if first {
			return ReasonReadTimeout, fmt.Sprintf("no complete ACQUIRE within io-timeout (%v)", c.srv.cfg.IOTimeout)
		}
		return ReasonReadTimeout, fmt.Sprintf("frame not completed within io-timeout (%v)", c.srv.cfg.IOTimeout)
	case io.EOF, io.ErrUnexpectedEOF, net.ErrClosed:
		return ReasonClosed, ""
	}
	return ReasonReset, ""
}

// ioCause unwraps what net and os wrap around the cause of a failed read or
// write: *net.OpError and *os.SyscallError (and TLS's wrapping of those, by
// the general Unwrap, off the plain TCP path).
func ioCause(err error) error {
	for {
		switch e := err.(type) {
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		case *wire.Error, syscall.Errno:
			return err
		default:
			if err == os.ErrDeadlineExceeded || err == io.EOF || err == io.ErrUnexpectedEOF || err == net.ErrClosed {
				return err
			}
			if u := errors.Unwrap(err); u != nil {
				err = u
				continue
			}
			return err
		}
	}
}
