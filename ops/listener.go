package ops

import (
	"net"
	"sync"
)

// LimitListener caps the open connections of the ops listener at n: past
// it, Accept waits until one closes, and new connections wait in the
// kernel's backlog, holding no descriptor of the process. It is
// golang.org/x/net/netutil's LimitListener, with one difference that the
// event stream needs: its connections give the one they wrap (NetConn), so
// that a stream can bound its socket's send buffer (ConnContext).
func LimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{} // closed by Close: a waiting Accept gives up
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its place back at its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn is the connection c wraps.
func (c *limitConn) NetConn() net.Conn { return c.Conn }
