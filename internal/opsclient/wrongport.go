package opsclient

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/batonlock/baton/clients/go/wire"
)

// An ops request sent to the lock protocol's port is told apart from a
// broken server: the lock server answers it with an ERROR frame, which the
// HTTP client would report as a malformed status line. (The other way
// round, a lock client on the ops port, is internal/sniff's.)

// LockPortError is an ops request answered in the lock protocol: the
// address is a lock port, not an ops port.
type LockPortError struct {
	Addr   string
	Answer string // the server's ERROR, as far as it was read
}

func (e *LockPortError) Error() string {
	return fmt.Sprintf("%s is Baton's lock protocol port, not its ops HTTP port (it answered a lock protocol %s): "+
		"give -ops-addr the server's -ops-addr (default %s)", e.Addr, e.Answer, DefaultAddr)
}

// lockPortDetector is a connection to an ops API whose first bytes are
// checked: the lock protocol's server answers an HTTP request with an
// ERROR frame (its type byte 0x80 begins no HTTP answer and no TLS record),
// which the HTTP client would report as a malformed status line.
type lockPortDetector struct {
	net.Conn
	addr string
	seen bool
}

func (c *lockPortDetector) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.seen || n == 0 {
		return n, err
	}
	c.seen = true
	if wire.Type(p[0]) != wire.TypeError {
		return n, err
	}
	answer := "ERROR"
	if _, payload, m, serr := wire.Split(p[:n]); serr == nil && m > 0 {
		if we, derr := wire.DecodeError(payload); derr == nil {
			answer = "ERROR " + we.Code.String()
			if we.Msg != "" {
				answer += " (" + TruncateRunes(strings.ToValidUTF8(we.Msg, "?"), 120) + ")"
			}
		}
	}
	return 0, &LockPortError{Addr: c.addr, Answer: answer}
}

// NetConn is the connection c wraps.
func (c *lockPortDetector) NetConn() net.Conn { return c.Conn }

// dialOpsAPI dials an ops API, and checks what answers.
func dialOpsAPI(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer // the request's context and the client's timeout bound it
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lockPortDetector{Conn: c, addr: addr}, nil
}
