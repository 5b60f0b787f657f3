package baton

import (
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestHeartbeatIntervalOnTheWire measures the schedule where the server sees
// it: a server over real TCP answers every request after replyDelay and
// records when each heartbeat arrives. The interval runs from the reply, so
// arrival to arrival the gap is replyDelay + interval, where interval =
// lease/4 − 2×RTT once the average has settled on RTT ≈ replyDelay: about
// lease/4 − replyDelay. Counted send to send instead, the gap would be the
// interval alone (lease/4 − 2×replyDelay); the bounds tell the two apart,
// with room for a loaded machine's late timers on the upper side only.
func TestHeartbeatIntervalOnTheWire(t *testing.T) {
	const (
		lease      = 400 * time.Millisecond
		replyDelay = 30 * time.Millisecond
		beats      = 14
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	arrivals := make(chan []time.Time, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			arrivals <- nil
			return
		}
		defer conn.Close()
		var got []time.Time
		var h [wire.HeaderSize]byte
		var p [wire.MaxFrame]byte
		for len(got) <= beats {
			if _, err := io.ReadFull(conn, h[:]); err != nil {
				break
			}
			hdr, err := wire.ParseHeader(h[:])
			if err != nil {
				break
			}
			if _, err := io.ReadFull(conn, p[:hdr.Length]); err != nil {
				break
			}
			if hdr.Type == wire.TypeHeartbeat {
				got = append(got, time.Now())
			}
			time.Sleep(replyDelay)
			if _, err := conn.Write(wire.AppendAcquired(nil, false, 1)); err != nil {
				break
			}
		}
		arrivals <- got
	}()

	c, err := New([]string{ln.Addr().String()}, WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(context.Background(), "beat")
	if err != nil {
		t.Fatal(err)
	}
	got := <-arrivals
	l.Release()
	if len(got) <= beats {
		t.Fatalf("got %d heartbeats, want %d (lock: %v)", len(got), beats+1, l.Err())
	}
	// The first few gaps still carry the average's settling; use the rest.
	var gaps []time.Duration
	for i := 5; i < len(got); i++ {
		gaps = append(gaps, got[i].Sub(got[i-1]))
	}
	slices.Sort(gaps)
	median := gaps[len(gaps)/2]
	base := lease / 4
	sendToSend := base - 2*replyDelay // the gap if the interval ran send to send
	low := replyDelay + sendToSend - 5*time.Millisecond
	high := base + replyDelay + 40*time.Millisecond
	t.Logf("heartbeat gaps at the server: median %v (want %v..%v; send-to-send counting would give ~%v)", median, low, high, sendToSend)
	if median < low || median > high {
		t.Errorf("median heartbeat gap %v, want in %v..%v (gaps %v)", median, low, high, gaps)
	}
}
