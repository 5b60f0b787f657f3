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
}

// Conn is one session. Reads are buffered so that a reply costs one read
// system call, not two (header, then payload).
type Conn struct {
	net.Conn
	buf  [wire.MaxFrame]byte // for writes
	rbuf [wire.MaxFrame]byte
	r, w int // unread bytes are rbuf[r:w]
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

// Acquire sends ACQUIRE for name with lease.
func (c *Conn) Acquire(name string, lease time.Duration, owner string) error {
	b, err := wire.AppendAcquire(c.buf[:0], wire.Acquire{
		Version: wire.Version,
		LeaseMs: uint32(lease / time.Millisecond),
		Name:    name,
		Owner:   owner,
	})
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
			return decode(h, p)
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

func decode(h wire.Header, p []byte) (Frame, error) {
	f := Frame{Type: h.Type}
	var err error
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
