package baton

import (
	"bytes"
	"context"
	"net"
	"syscall"
	"time"
)

// dialer is the dialer of one connection. TCP keepalive is off: heartbeats
// and the lease detect a dead peer, so the probes would only cost four
// setsockopt calls per claim.
func dialer(set *settings) *net.Dialer {
	d := &net.Dialer{KeepAlive: -1}
	if set.fastOpen {
		d.Control = fastOpenControl
	}
	return d
}

// resetOnClose makes the close of c a reset (SO_LINGER 0): the release
// reaches the server as a RST, and the client keeps no TIME_WAIT socket,
// whose ports a claim storm would otherwise exhaust (the kernel's search
// for a free port among thousands of them was a third of the machine's
// CPU). Best effort: where the platform refuses, the close is a FIN.
func resetOnClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}

// closeNormally undoes resetOnClose: the close of c sends a FIN after what
// is still unsent.
func closeNormally(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(-1)
	}
}

// fastOpenControl asks for TCP Fast Open on the socket before it connects
// (fastopen_linux.go; settings.check refuses it elsewhere).
func fastOpenControl(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = setFastOpenConnect(fd) }); err != nil {
		return err
	}
	return serr
}

// sendInSYN writes the ACQUIRE syn on raw, a connection dialled with Fast
// Open whose connect has not happened yet: the kernel sends it in the SYN
// (or, without a cookie, after an ordinary handshake). It then waits for
// the handshake to end, as a dial does, so that a server that is down
// fails the dial and Acquire moves on to the next address; the wait costs
// nothing, as the server's answer comes right behind its SYN-ACK. The
// returned conn drops the session's own write of the same ACQUIRE.
func sendInSYN(ctx context.Context, raw net.Conn, syn []byte) (conn, rawOut net.Conn, err error) {
	tc, ok := raw.(*net.TCPConn)
	if !ok {
		return raw, raw, nil
	}
	// The dial's context (its timeout included) bounds the wait.
	stop := context.AfterFunc(ctx, func() { tc.SetWriteDeadline(aLongTimeAgo) })
	if _, err = tc.Write(syn); err == nil {
		err = awaitConnected(tc)
	}
	if !stop() && err == nil {
		err = ctx.Err() // ended just as the handshake did: its deadline is set
	}
	if err != nil {
		tc.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, err
	}
	return &sentConn{TCPConn: tc, sent: syn}, tc, nil
}

var aLongTimeAgo = time.Unix(1, 0)

// sentConn is a connection whose ACQUIRE went out with the dial.
type sentConn struct {
	*net.TCPConn
	sent []byte // dropped once, when the session writes it
}

func (c *sentConn) Write(b []byte) (int, error) {
	if c.sent != nil && bytes.Equal(b, c.sent) {
		c.sent = nil // only the session's run goroutine writes
		return len(b), nil
	}
	c.sent = nil
	return c.TCPConn.Write(b)
}
