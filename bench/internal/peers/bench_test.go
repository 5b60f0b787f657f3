package peers

import (
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/internal/system"
)

// These are sanity figures for each peer adapter, not the bench itself
// (cmd/bench runs the scenarios side by side with Baton). Run with the
// peers up, e.g.:
//
//	go test -run '^$' -bench . -benchtime 200x ./internal/peers

const settleTime = 150 * time.Millisecond

// BenchmarkCycle: one client takes and lets go of one free lock.
func BenchmarkCycle(b *testing.B) {
	eachPeer(b, func(b *testing.B, p *peerUnderTest) {
		c, name := p.newClient(b), uniqueName(b)
		for b.Loop() {
			if err := c.Lock(b.Context(), name); err != nil {
				b.Fatal(err)
			}
			if err := c.Unlock(b.Context(), name); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	})
}

// BenchmarkHandover: one holder, one waiter that has waited settleTime;
// the time from the holder's Unlock call to the waiter's Lock return. The
// two clients swap roles each round.
//
// The settle matters for etcd: a waiter's watch starts "unsynced" and
// etcd's store syncs those every 100 ms, so a release in a waiter's first
// 100 ms reaches it only at the next sync.
func BenchmarkHandover(b *testing.B) {
	eachPeer(b, func(b *testing.B, p *peerUnderTest) {
		name := uniqueName(b)
		clients := [2]system.Client{p.newClient(b), p.newClient(b)}
		lockWithin(b, clients[0], name)
		type grant struct {
			at  time.Time
			err error
		}
		var handovers []time.Duration
		holder := 0
		for b.Loop() {
			waiter := clients[1-holder]
			granted := make(chan grant, 1)
			go func() {
				err := waiter.Lock(b.Context(), name)
				granted <- grant{time.Now(), err}
			}()
			waitForWaiters(b, p, name, 1)
			time.Sleep(settleTime)
			start := time.Now()
			unlockWithin(b, clients[holder], name)
			g := <-granted
			if g.err != nil {
				b.Fatal(g.err)
			}
			handovers = append(handovers, g.at.Sub(start))
			holder = 1 - holder
		}
		unlockWithin(b, clients[holder], name)
		slices.Sort(handovers)
		quantile := func(q float64) float64 {
			return float64(handovers[int(q*float64(len(handovers)-1))].Microseconds())
		}
		b.ReportMetric(quantile(0.5), "p50-µs")
		b.ReportMetric(quantile(0.99), "p99-µs")
	})
}

// BenchmarkLoopbackRoundTrip is the baseline the figures above are read
// against: one byte to an echo server on 127.0.0.1 and back, back to back
// and after 20 ms of idle (when the CPUs may have gone to sleep).
func BenchmarkLoopbackRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, conn)
	})
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	buf := []byte{0}
	roundTrip := func() {
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("back-to-back", func(b *testing.B) {
		for b.Loop() {
			roundTrip()
		}
	})
	b.Run("after-20ms-idle", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			b.StopTimer()
			time.Sleep(20 * time.Millisecond)
			b.StartTimer()
			start := time.Now()
			roundTrip()
			total += time.Since(start)
		}
		b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/rt")
	})
}
