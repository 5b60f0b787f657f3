package cli

// The wrong port, both ways: a lock client that dialled the ops HTTP port,
// and an ops request sent to the lock protocol's port. Each side tells the
// other what it reached, at once and in the other's own language.

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// opsPortRefusal begins the ERROR message the ops listener answers a lock
// client with; the Go client recognises it (ErrWrongPort), and so baton
// run (exit 78).
const opsPortRefusal = "this is Baton's ops HTTP port"

// Bounds of the answer to a lock client on the ops port: its write, and the
// wait for the client's close (the client closes once it has the ERROR; a
// close with its frame unread would be a reset that could destroy the
// answer before the client reads it).
const (
	refusalWriteTimeout = time.Second
	refusalDrainTimeout = time.Second
	refusalDrainMax     = 64 << 10
)

// errLockClient ends an ops connection whose first bytes were a lock
// client's frame. It reads as io.EOF to the HTTP server, which then closes
// the connection without an answer of its own.
var errLockClient = io.EOF

// refuseLockClients wraps the ops listener ln (the plain TCP one, under TLS
// and the connection cap): a connection whose first byte is a lock
// client's frame type (ACQUIRE, HEARTBEAT), which no HTTP request and no
// TLS handshake begins with, gets an ERROR PROTOCOL that says where the
// lock protocol is, lockAddr, and is closed.
func refuseLockClients(ln net.Listener, lockAddr string) net.Listener {
	msg := opsPortRefusal + "; the lock protocol is on " + lockAddr
	return &lockClientListener{Listener: ln, refusal: wire.AppendError(nil, wire.CodeProtocol, msg)}
}

type lockClientListener struct {
	net.Listener
	refusal []byte // the ERROR frame
}

func (l *lockClientListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lockClientConn{Conn: c, refusal: l.refusal}, nil
}

// lockClientConn looks at the first bytes read from an ops connection.
// Only the HTTP server's goroutine of the connection reads it.
type lockClientConn struct {
	net.Conn
	refusal []byte
	seen    bool // the first byte has been read and let through
}

func (c *lockClientConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.seen || n == 0 {
		return n, err
	}
	c.seen = true
	if t := wire.Type(p[0]); t != wire.TypeAcquire && t != wire.TypeHeartbeat {
		return n, err
	}
	c.Conn.SetWriteDeadline(time.Now().Add(refusalWriteTimeout))
	if _, werr := c.Conn.Write(c.refusal); werr == nil {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		c.Conn.SetReadDeadline(time.Now().Add(refusalDrainTimeout))
		io.Copy(io.Discard, io.LimitReader(c.Conn, refusalDrainMax))
	}
	return 0, errLockClient
}

// NetConn is the connection c wraps (see ops.ConnContext).
func (c *lockClientConn) NetConn() net.Conn { return c.Conn }

// lockAddrText names the lock protocol's listener for the refusal: the
// address handed out to clients if one is set, else the bound address,
// with "this host" for one that listens on every address.
func lockAddrText(advertised string, bound net.Addr) string {
	if advertised != "" {
		return advertised
	}
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return bound.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return "port " + port + " of this host"
	}
	return bound.String()
}

// lockPortError is an ops request answered in the lock protocol: the
// address is a lock port, not an ops port.
type lockPortError struct {
	addr   string
	answer string // the server's ERROR, as far as it was read
}

func (e *lockPortError) Error() string {
	return fmt.Sprintf("%s is Baton's lock protocol port, not its ops HTTP port (it answered a lock protocol %s): "+
		"give -ops-addr the server's -ops-addr (default %s)", e.addr, e.answer, defaultOpsAddr)
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
				answer += " (" + truncateRunes(strings.ToValidUTF8(we.Msg, "?"), 120) + ")"
			}
		}
	}
	return 0, &lockPortError{addr: c.addr, answer: answer}
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
