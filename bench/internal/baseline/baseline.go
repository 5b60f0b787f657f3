// Package baseline measures the physical limit of this machine, in the same
// run as the lock services: a raw TCP round trip on loopback (1-byte echo,
// back to back and after 20 ms idle), the cost of connect+close, and the
// floor of a handover whose release is a close (a bare server that writes
// one byte to the next connection when it reads EOF on the previous one).
// Every other figure is also given as a ratio to one of these.
package baseline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/batonlock/baton/bench/internal/stats"
)

// Idle is the pause before each "after idle" round trip: long enough for
// the CPU to go idle, as it has before a handover that follows a wait.
const Idle = 20 * time.Millisecond

// Result is the baseline of one run.
type Result struct {
	// RTT is a 1-byte echo round trip on one connection, back to back.
	RTT stats.Summary `json:"rtt"`
	// RTTAfterIdle is the same round trip after Idle of silence.
	RTTAfterIdle stats.Summary `json:"rtt_after_idle"`
	// ConnectClose is dial + close of a new connection.
	ConnectClose stats.Summary `json:"connect_close"`
	// ConnectEchoClose is dial, one echo round trip, close: the least a
	// claim on a new connection can cost (Baton's uncontended cycle).
	ConnectEchoClose stats.Summary `json:"connect_echo_close"`
	// CloseNotify is the floor of a close-based handover: from the client's
	// close of one connection to its read, on the next one, of the byte a
	// bare server writes when it reads that close's EOF. It is what any
	// server that learns of a release from a close pays (Baton's release).
	CloseNotify stats.Summary `json:"close_notify"`
	// CloseNotifyAfterIdle is the same after Idle of silence.
	CloseNotifyAfterIdle stats.Summary `json:"close_notify_after_idle"`
}

// Sizes bounds the measurement.
type Sizes struct {
	RoundTrips int // back-to-back round trips
	IdleTrips  int // round trips after Idle
	Connects   int // connections for each connect figure (TIME_WAIT bounds it)
}

// Serve is the echo server: it answers each byte with itself until the
// peer closes. It returns when ln is closed.
func Serve(ln net.Listener) error {
	return AcceptEach(ln, func(c net.Conn) {
		go func() {
			defer c.Close()
			var b [1]byte
			for {
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				if _, err := c.Write(b[:]); err != nil {
					return
				}
			}
		}()
	})
}

// AcceptEach hands every connection ln accepts to handle, until ln is
// closed (nil) or accepting fails. The floor servers use it too.
func AcceptEach(ln net.Listener, handle func(net.Conn)) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		handle(c)
	}
}

// ServeCloseNotify is the close-notify server: it pairs connections in
// accept order, writes one byte to each when it is accepted (the client's
// sign that the pair is ready), and when it reads EOF (or an error) on one
// connection it writes one byte to the next and closes the first. It
// returns when ln is closed.
func ServeCloseNotify(ln net.Listener) error {
	var prev net.Conn
	defer func() {
		if prev != nil {
			prev.Close()
		}
	}()
	return AcceptEach(ln, func(c net.Conn) {
		c.Write([]byte{0})
		if prev != nil {
			go func(holder, next net.Conn) {
				defer holder.Close()
				var b [16]byte
				for {
					if _, err := holder.Read(b[:]); err != nil {
						next.Write([]byte{1})
						return
					}
				}
			}(prev, c)
		}
		prev = c
	})
}

// Measure takes the baseline against the echo server at addr and the
// close-notify server at notifyAddr.
func Measure(ctx context.Context, addr, notifyAddr string, sz Sizes) (Result, error) {
	var r Result
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return r, fmt.Errorf("dial echo server %s: %w", addr, err)
	}
	defer c.Close()
	if r.RTT, err = roundTrips(ctx, c, sz.RoundTrips, 0); err != nil {
		return r, err
	}
	if r.RTTAfterIdle, err = roundTrips(ctx, c, sz.IdleTrips, Idle); err != nil {
		return r, err
	}
	if r.ConnectClose, err = connects(ctx, addr, sz.Connects, false); err != nil {
		return r, err
	}
	if r.ConnectEchoClose, err = connects(ctx, addr, sz.Connects, true); err != nil {
		return r, err
	}
	if r.CloseNotify, err = closeNotifies(ctx, notifyAddr, sz.Connects, 0); err != nil {
		return r, err
	}
	if r.CloseNotifyAfterIdle, err = closeNotifies(ctx, notifyAddr, sz.IdleTrips, Idle); err != nil {
		return r, err
	}
	return r, nil
}

// closeNotifies measures n close-notify handovers, each after idle.
func closeNotifies(ctx context.Context, addr string, n int, idle time.Duration) (stats.Summary, error) {
	var d net.Dialer
	dial := func() (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("dial close-notify server %s: %w", addr, err)
		}
		var ready [1]byte
		if _, err := io.ReadFull(c, ready[:]); err != nil {
			c.Close()
			return nil, fmt.Errorf("close-notify server %s: %w", addr, err)
		}
		return c, nil
	}
	holder, err := dial()
	if err != nil {
		return stats.Summary{}, err
	}
	defer func() { holder.Close() }()
	samples := make([]time.Duration, 0, n)
	var b [1]byte
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next, err := dial()
		if err != nil {
			return stats.Summary{}, err
		}
		if idle > 0 {
			time.Sleep(idle)
		}
		start := time.Now()
		holder.Close()
		holder = next
		if _, err := io.ReadFull(next, b[:]); err != nil {
			return stats.Summary{}, fmt.Errorf("close-notify read: %w", err)
		}
		samples = append(samples, time.Since(start))
	}
	return stats.Summarize(samples), nil
}

func roundTrips(ctx context.Context, c net.Conn, n int, idle time.Duration) (stats.Summary, error) {
	samples := make([]time.Duration, 0, n)
	var b [1]byte
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if idle > 0 {
			time.Sleep(idle)
		}
		start := time.Now()
		if err := echo(c, &b); err != nil {
			return stats.Summary{}, err
		}
		samples = append(samples, time.Since(start))
	}
	return stats.Summarize(samples), nil
}

func echo(c net.Conn, b *[1]byte) error {
	b[0] = 'x'
	if _, err := c.Write(b[:]); err != nil {
		return fmt.Errorf("echo write: %w", err)
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("echo read: %w", err)
	}
	return nil
}

func connects(ctx context.Context, addr string, n int, withEcho bool) (stats.Summary, error) {
	samples := make([]time.Duration, 0, n)
	var b [1]byte
	var d net.Dialer
	for i := 0; i < n && ctx.Err() == nil; i++ {
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return stats.Summary{}, fmt.Errorf("dial echo server %s: %w", addr, err)
		}
		if withEcho {
			if err := echo(c, &b); err != nil {
				c.Close()
				return stats.Summary{}, err
			}
		}
		c.Close()
		samples = append(samples, time.Since(start))
	}
	return stats.Summarize(samples), nil
}
