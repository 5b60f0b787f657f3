// Package faultproxy is an in-process TCP proxy for fault injection in tests.
// It sits between a client and a server on loopback and can delay, stall,
// drop and reset the traffic of each direction, and report every chunk it
// forwards with timestamps.
//
// A stall holds bytes (and the close that follows them) without losing them,
// as a frozen link or a paused peer does: the sender's kernel still accepts
// the data, nothing arrives. A drop loses them: the sender's writes succeed
// and nothing ever arrives. A reset sends RST both ways.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Direction is one way through the proxy, or both.
type Direction uint8

// Directions.
const (
	Up   Direction = 1 << iota // client to server
	Down                       // server to client
	Both = Up | Down
)

func (d Direction) String() string {
	switch d {
	case Up:
		return "up"
	case Down:
		return "down"
	case Both:
		return "both"
	}
	return "none"
}

// Chunk is one read's worth of bytes that the proxy forwarded or dropped.
type Chunk struct {
	Link    int       // the connection, numbered from 1 in accept order
	Dir     Direction // Up or Down
	Read    time.Time // when the proxy read it from the sender
	Sent    time.Time // when it finished writing it to the receiver; zero if dropped
	Data    []byte
	Dropped bool
}

// queueLen bounds the chunks held per direction of a link; past it the
// proxy stops reading, so a stall pushes back on the sender as TCP would.
const queueLen = 256

// Proxy forwards every connection made to Addr to its target. Its settings
// apply to all links, current and future. Make one with New.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	delay    [2]time.Duration
	stalled  [2]bool
	dropping [2]bool
	changed  chan struct{} // closed, and replaced, at every change of setting
	links    map[*link]struct{}
	accepted int
	tap      func(Chunk)
	closed   bool

	wg sync.WaitGroup // every goroutine of the proxy
}

// New starts a proxy on 127.0.0.1:0 in front of target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is the number of connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// SetDelay adds d to the time every chunk read in dir from now on takes to be
// delivered (one way; a round trip through Both gets 2d). Order is kept.
func (p *Proxy) SetDelay(dir Direction, d time.Duration) {
	p.set(dir, func(i int) { p.delay[i] = d })
}

// Stall holds everything in dir, bytes and closes, until Resume.
func (p *Proxy) Stall(dir Direction) { p.set(dir, func(i int) { p.stalled[i] = true }) }

// Resume delivers what Stall held, in order, and forwards again.
func (p *Proxy) Resume(dir Direction) { p.set(dir, func(i int) { p.stalled[i] = false }) }

// Drop makes the proxy discard (drop true) or forward (false) the bytes in
// dir. Closes are still forwarded.
func (p *Proxy) Drop(dir Direction, drop bool) { p.set(dir, func(i int) { p.dropping[i] = drop }) }

// SetTap sets a function called for every chunk forwarded or dropped, from
// the link's goroutines (so it must be safe for concurrent use); nil stops.
func (p *Proxy) SetTap(f func(Chunk)) {
	p.mu.Lock()
	p.tap = f
	p.mu.Unlock()
}

// Reset ends every current link with a TCP reset to both sides.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// Close stops accepting, closes every link and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close(false)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) set(dir Direction, f func(i int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, d := range []Direction{Up, Down} {
		if dir&d != 0 {
			f(i)
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // a temporary error: back off
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.accepted++
		l := &link{p: p, n: p.accepted, client: c, done: make(chan struct{}),
			up: make(chan item, queueLen), down: make(chan item, queueLen)}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		// Read the client at once, so that the timestamps of its first
		// bytes do not include the dial to the target.
		go l.read(c, l.up, 0)
		go l.connect()
	}
}

// connect dials the target and starts the rest of the link.
func (l *link) connect() {
	defer l.p.wg.Done()
	s, err := net.DialTimeout("tcp", l.p.target, 5*time.Second)
	if err != nil {
		// The target is down: the client sees a reset, as it would
		// dialling the target itself (close enough for tests).
		l.close(true)
		return
	}
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		s.Close()
		return
	default:
	}
	l.server = s
	l.p.wg.Add(3)
	l.mu.Unlock()
	go l.write(s, l.up, 0, Up)
	go l.read(s, l.down, 1)
	go l.write(l.client, l.down, 1, Down)
}

// link is one proxied connection: client <-> proxy <-> server.
type link struct {
	p      *Proxy
	n      int
	client net.Conn
	up     chan item
	down   chan item

	mu       sync.Mutex
	server   net.Conn // nil until the target answers
	halfDone int      // directions whose close has been forwarded
	once     sync.Once
	done     chan struct{}
}

type item struct {
	data      []byte
	eof       bool
	readAt    time.Time
	deliverAt time.Time
}

// read reads src into q until src fails; the end goes into q as an eof item.
func (l *link) read(src net.Conn, q chan<- item, i int) {
	defer l.p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		now := time.Now()
		l.p.mu.Lock()
		delay := l.p.delay[i]
		l.p.mu.Unlock()
		it := item{readAt: now, deliverAt: now.Add(delay)}
		if n > 0 {
			it.data = append([]byte(nil), buf[:n]...)
		} else if err != nil {
			it.eof = true
		} else {
			continue
		}
		select {
		case q <- it:
		case <-l.done:
			return
		}
		if n > 0 && err != nil {
			select {
			case q <- item{eof: true, readAt: now, deliverAt: now.Add(delay)}:
			case <-l.done:
			}
			return
		}
		if it.eof {
			return
		}
	}
}

// write delivers q to dst: each item at its time, none while dir is stalled.
func (l *link) write(dst net.Conn, q <-chan item, i int, dir Direction) {
	defer l.p.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var it item
		select {
		case it = <-q:
		case <-l.done:
			return
		}
		if d := time.Until(it.deliverAt); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-l.done:
				return
			}
		}
		var drop bool
		var tap func(Chunk)
		for {
			l.p.mu.Lock()
			stalled, changed := l.p.stalled[i], l.p.changed
			drop, tap = l.p.dropping[i], l.p.tap
			l.p.mu.Unlock()
			if !stalled {
				break
			}
			select {
			case <-changed:
			case <-l.done:
				return
			}
		}
		if it.eof {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			l.mu.Lock()
			l.halfDone++
			both := l.halfDone == 2
			l.mu.Unlock()
			if both {
				l.close(false)
			}
			return
		}
		c := Chunk{Link: l.n, Dir: dir, Read: it.readAt, Data: it.data, Dropped: drop}
		if !drop {
			if _, err := dst.Write(it.data); err != nil {
				l.close(false)
				return
			}
			c.Sent = time.Now()
		}
		if tap != nil {
			tap(c)
		}
	}
}

// close ends the link, with a reset to both sides if rst.
func (l *link) close(rst bool) {
	l.once.Do(func() {
		l.mu.Lock()
		close(l.done)
		server := l.server
		l.mu.Unlock()
		conns := []net.Conn{l.client}
		if server != nil {
			conns = append(conns, server)
		}
		for _, c := range conns {
			if rst {
				resetClose(c)
			} else {
				c.Close()
			}
		}
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

// resetClose closes c so that the peer gets a RST, not a FIN.
func resetClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
