// Package baseline measures the physical limit of this machine, in the same
// run as the lock services: a raw TCP round trip on loopback (1-byte echo,
// back to back and after 20 ms idle) and the cost of connect+close. Every
// other figure is also given as a ratio to one of these.
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
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
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
	}
}

// Measure takes the baseline against the echo server at addr.
func Measure(ctx context.Context, addr string, sz Sizes) (Result, error) {
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
	return r, nil
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
