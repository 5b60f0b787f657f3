// Package rawwire is a minimal Baton session spoken directly in package
// wire's frames, without the Go client's goroutines: the load generator
// holds tens of thousands of them, and the failure-detection scenario needs
// a holder that can fall silent at will.
package rawwire

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// Frame is one frame from the server, decoded.
type Frame struct {
	Type     wire.Type
	Push     bool   // ACQUIRED: a promotion, not a reply
	Token    uint64 // ACQUIRED
	Position uint32 // WAITING
	Err      *wire.Error
	// Credential: in a version 3 session, the frame carried the claim's
	// credential (an ACQUIRED with CREDENTIAL, a WAITING with TICKET).
	Credential bool
}

// Conn is one session. Reads are buffered so that a reply costs one read
// system call, not two (header, then payload).
type Conn struct {
	net.Conn
	buf  [wire.MaxFrame]byte // for writes
	rbuf [wire.MaxFrame]byte
	r, w int  // unread bytes are rbuf[r:w]
	v3   bool // the session began with a version 3 ACQUIRE: its frames may carry credentials
}

// Dial connects to addr, from the local address laddr if not nil.
func Dial(ctx context.Context, addr string, laddr net.Addr) (*Conn, error) {
	d := net.Dialer{LocalAddr: laddr}
	if laddr != nil {
		d.Control = bindNoPort
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}

// Acquire sends ACQUIRE for name with lease: an exclusive claim, in
// version 1.
func (c *Conn) Acquire(name string, lease time.Duration, owner string) error {
	return c.send(wire.Acquire{
		Version: wire.Version,
		LeaseMs: uint32(lease / time.Millisecond),
		Name:    name,
		Owner:   owner,
	})
}

// AcquireShared sends a version 2 ACQUIRE for one of limit slots of name:
// a shared claim, as a counting semaphore's client takes one.
func (c *Conn) AcquireShared(name string, limit int, lease time.Duration, owner string) error {
	if limit < 1 || limit > wire.MaxLimit {
		return fmt.Errorf("acquire %q: limit %d must be 1 to %d", name, limit, wire.MaxLimit)
	}
	return c.send(wire.Acquire{
		Version: wire.Version2,
		Flags:   wire.FlagShared,
		LeaseMs: uint32(lease / time.Millisecond),
		Limit:   uint16(limit),
		Name:    name,
		Owner:   owner,
	})
}

// AcquireVersion sends an exclusive ACQUIRE for name with lease in
// protocol version (1, 2 or 3; a new claim, no resume): the same claim,
// whose session differs by what the server keeps for it.
func (c *Conn) AcquireVersion(version uint8, name string, lease time.Duration, owner string) error {
	if version < wire.Version1 || version > wire.Version3 {
		return fmt.Errorf("acquire %q: no protocol version %d", name, version)
	}
	a := wire.Acquire{Version: version, LeaseMs: uint32(lease / time.Millisecond), Name: name, Owner: owner}
	if version > wire.Version1 {
		a.Limit = 1
	}
	c.v3 = version == wire.Version3
	return c.send(a)
}

func (c *Conn) send(a wire.Acquire) error {
	b, err := wire.AppendAcquire(c.buf[:0], a)
	if err != nil {
		return err
	}
	_, err = c.Write(b)
	return err
}

var heartbeat = wire.AppendHeartbeat(nil)

// Heartbeat sends one HEARTBEAT.
func (c *Conn) Heartbeat() error {
	_, err := c.Write(heartbeat)
	return err
}

// ReadFrame reads the next frame; an ERROR frame is returned as a Frame
// with Err set, not as an error.
func (c *Conn) ReadFrame() (Frame, error) {
	for {
		h, p, n, err := wire.Split(c.rbuf[c.r:c.w])
		if err != nil {
			return Frame{}, err
		}
		if n > 0 {
			c.r += n
			if c.r == c.w {
				c.r, c.w = 0, 0
			}
			return decode(h, p, c.v3)
		}
		if c.r > 0 { // keep the partial frame at the front
			c.w = copy(c.rbuf[:], c.rbuf[c.r:c.w])
			c.r = 0
		}
		m, err := c.Conn.Read(c.rbuf[c.w:])
		if m == 0 && err == nil {
			err = io.ErrNoProgress
		}
		c.w += m
		if err != nil && m == 0 {
			if err == io.EOF && c.w > 0 {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
}

func decode(h wire.Header, p []byte, v3 bool) (Frame, error) {
	f := Frame{Type: h.Type}
	var err error
	switch {
	case v3 && h.Type == wire.TypeAcquired:
		var a wire.Acquired
		a, err = wire.DecodeAcquiredV3(p)
		f.Push, f.Token, f.Credential = a.Push, a.Token, a.WithCredential
		return f, err
	case v3 && h.Type == wire.TypeWaiting:
		var w wire.Waiting
		w, err = wire.DecodeWaitingV3(p)
		f.Position, f.Credential = w.Position, w.WithTicket
		return f, err
	}
	switch h.Type {
	case wire.TypeAcquired:
		f.Push, f.Token, err = wire.DecodeAcquired(p)
	case wire.TypeWaiting:
		f.Position, err = wire.DecodeWaiting(p)
	case wire.TypeError:
		f.Err, err = wire.DecodeError(p)
	default:
		err = fmt.Errorf("unexpected frame type %v from the server", h.Type)
	}
	return f, err
}
