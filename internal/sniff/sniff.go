// Package sniff looks at the first byte of each connection to the ops
// HTTP port: a lock client that dialled it (its first frame, ACQUIRE or
// HEARTBEAT, begins no HTTP request and no TLS handshake) is told at once,
// in its own protocol, where the lock protocol is. The other way round, an
// ops request sent to the lock port, is recognised by the ops client
// (internal/opsclient).
package sniff

import (
	"io"
	"net"
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

// RefuseLockClients wraps the ops listener ln (the plain TCP one, under TLS
// and the connection cap): a connection whose first byte is a lock
// client's frame type (ACQUIRE, HEARTBEAT), which no HTTP request and no
// TLS handshake begins with, gets an ERROR PROTOCOL that says where the
// lock protocol is, lockAddr, and is closed.
func RefuseLockClients(ln net.Listener, lockAddr string) net.Listener {
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

// LockAddrText names the lock protocol's listener for the refusal: the
// address handed out to clients if one is set, else the bound address,
// with "this host" for one that listens on every address.
func LockAddrText(advertised string, bound net.Addr) string {
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
