package server_test

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// BenchmarkLoopbackRTT is the baseline: a 3-byte echo round trip on raw
// TCP over loopback, back to back. Server figures are held against it.
func BenchmarkLoopbackRTT(b *testing.B) { benchLoopbackRTT(b, 0) }

// BenchmarkLoopbackRTTAfterIdle is the same round trip after 20 ms of
// idle, the baseline for a handover that follows a wait: on these VMs the
// CPU wake-up costs several times a back-to-back round trip.
func BenchmarkLoopbackRTTAfterIdle(b *testing.B) { benchLoopbackRTT(b, 20*time.Millisecond) }

func benchLoopbackRTT(b *testing.B, idle time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var buf [3]byte
		for {
			if _, err := io.ReadFull(c, buf[:]); err != nil {
				return
			}
			if _, err := c.Write(buf[:]); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := []byte{2, 0, 0}
	var buf [3]byte
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if idle > 0 {
			b.StopTimer()
			time.Sleep(idle)
			b.StartTimer()
		}
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeat is one HEARTBEAT and its ACQUIRED reply, back to back,
// through the real server: compare with BenchmarkLoopbackRTT.
func BenchmarkHeartbeat(b *testing.B) { benchHeartbeat(b, true) }

// BenchmarkHeartbeatNoPark is BenchmarkHeartbeat with ParkIdle off: the
// session keeps its reader goroutine between heartbeats.
func BenchmarkHeartbeatNoPark(b *testing.B) { benchHeartbeat(b, false) }

func benchHeartbeat(b *testing.B, park bool) {
	srv := batontest.StartServer(b, func(c *server.Config) { c.ParkIdle = park })
	c := batontest.Dial(b, srv.Addr)
	heartbeatLoop(b, c)
}

// heartbeatLoop acquires on c and times back-to-back heartbeats on it.
func heartbeatLoop(b *testing.B, c *batontest.Conn) {
	c.Acquire("bench", time.Minute, false, "")
	c.ReadFrame(time.Second)
	// ReadFrame left a read deadline a second away; the loop runs longer.
	c.Conn.SetDeadline(time.Time{})
	hb := wire.AppendHeartbeat(nil)
	var buf [12]byte
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Conn.Write(hb); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c.Conn, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandover measures from the holder's close to the waiter's
// receipt of the ACQUIRED push, with one waiter queued each time.
func BenchmarkHandover(b *testing.B) { benchHandover(b, 0, true) }

// BenchmarkHandoverNoPark is BenchmarkHandover with ParkIdle off.
func BenchmarkHandoverNoPark(b *testing.B) { benchHandover(b, 0, false) }

// BenchmarkHandoverAfterIdle is a handover after 20 ms of idle: compare
// with BenchmarkLoopbackRTTAfterIdle.
func BenchmarkHandoverAfterIdle(b *testing.B) { benchHandover(b, 20*time.Millisecond, true) }

// BenchmarkHandoverAfterIdleNoPark is BenchmarkHandoverAfterIdle with
// ParkIdle off.
func BenchmarkHandoverAfterIdleNoPark(b *testing.B) { benchHandover(b, 20*time.Millisecond, false) }

func benchHandover(b *testing.B, idle time.Duration, park bool) {
	srv := batontest.StartServer(b, func(c *server.Config) { c.ParkIdle = park })
	holder := batontest.Dial(b, srv.Addr)
	holder.Acquire("bench", time.Minute, false, "")
	holder.ReadFrame(time.Second)
	var total time.Duration
	var each []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	// ns/op includes dialling the next waiter; ns/handover is the figure.
	// (StopTimer/StartTimer would read memory statistics, stopping the
	// world, right before the measured close.)
	for b.Loop() {
		waiter := batontest.Dial(b, srv.Addr)
		waiter.Acquire("bench", time.Minute, false, "")
		if f := waiter.ReadFrame(time.Second); f.Type != wire.TypeWaiting {
			b.Fatalf("got %v, want WAITING", f)
		}
		time.Sleep(idle)
		start := time.Now()
		holder.Conn.Close()
		if f := waiter.ReadFrame(time.Second); !f.Push {
			b.Fatalf("got %v, want the ACQUIRED push", f)
		}
		d := time.Since(start)
		total += d
		each = append(each, d)
		holder = waiter
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/handover")
	b.ReportMetric(float64(p50(each).Nanoseconds()), "p50-ns/handover")
}

// p50 is the median of ds (which it sorts).
func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkLoopbackCloseNotify is the physical floor of a handover: a bare
// TCP server that, when it reads EOF on one connection, writes 3 bytes to
// another. Measured like BenchmarkHandover: from the client's close of the
// first connection to its read of the 3 bytes on the second.
func BenchmarkLoopbackCloseNotify(b *testing.B) { benchCloseNotify(b, 0) }

// BenchmarkLoopbackCloseNotifyAfterIdle is the same after 20 ms of idle.
func BenchmarkLoopbackCloseNotifyAfterIdle(b *testing.B) {
	benchCloseNotify(b, 20*time.Millisecond)
}

func benchCloseNotify(b *testing.B, idle time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	// The server pairs connections in accept order: each one, at its EOF,
	// notifies the next. A byte on accept tells the client that the pair is
	// ready (as WAITING does in BenchmarkHandover).
	go func() {
		var prev net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte{0})
			if prev != nil {
				go func(holder, next net.Conn) {
					defer holder.Close()
					var buf [16]byte
					for {
						if _, err := holder.Read(buf[:]); err != nil {
							next.Write([]byte{1, 2, 3})
							return
						}
					}
				}(prev, c)
			}
			prev = c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		var ready [1]byte
		if _, err := io.ReadFull(c, ready[:]); err != nil {
			b.Fatal(err)
		}
		return c
	}
	holder := dial()
	var total time.Duration
	var each []time.Duration
	var buf [3]byte
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		waiter := dial()
		time.Sleep(idle)
		start := time.Now()
		holder.Close()
		if _, err := io.ReadFull(waiter, buf[:]); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		total += d
		each = append(each, d)
		holder = waiter
	}
	holder.Close()
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/handover")
	b.ReportMetric(float64(p50(each).Nanoseconds()), "p50-ns/handover")
}
