package server_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/wire"
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
func BenchmarkHeartbeat(b *testing.B) {
	srv := batontest.StartServer(b)
	c := batontest.Dial(b, srv.Addr)
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
func BenchmarkHandover(b *testing.B) { benchHandover(b, 0) }

// BenchmarkHandoverAfterIdle is a handover after 20 ms of idle: compare
// with BenchmarkLoopbackRTTAfterIdle.
func BenchmarkHandoverAfterIdle(b *testing.B) { benchHandover(b, 20*time.Millisecond) }

func benchHandover(b *testing.B, idle time.Duration) {
	srv := batontest.StartServer(b)
	holder := batontest.Dial(b, srv.Addr)
	holder.Acquire("bench", time.Minute, false, "")
	holder.ReadFrame(time.Second)
	var total time.Duration
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
		total += time.Since(start)
		holder = waiter
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/handover")
}
