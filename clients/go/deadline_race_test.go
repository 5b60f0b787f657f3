package baton

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestPushAtTheDeadline: a promotion push that arrives as the 0.8 × lease
// deadline passes must never give Acquire a Lock that is dead already with
// an error that does not wrap ErrLockLost. A server over real TCP answers
// WAITING and then pushes ACQUIRED a hair before or after the client's
// deadline; the race between the reader's hand-off of the grant and the
// deadline's timer is hit many times.
func TestPushAtTheDeadline(t *testing.T) {
	const (
		lease   = 10 * time.Millisecond
		timeout = lease * 8 / 10
		tries   = 1000
		workers = 16
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var serving sync.WaitGroup
	t.Cleanup(func() { ln.Close(); serving.Wait() })
	serving.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			serving.Go(func() { pushNearDeadline(conn, timeout) })
		}
	})

	c, err := New([]string{ln.Addr().String()}, WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	var granted, deadAtReturn, lostGranted atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range tries / workers {
				ctx, cancel := context.WithTimeout(context.Background(), 20*lease)
				l, err := c.Acquire(ctx, "race")
				cancel()
				switch {
				case err == nil:
					granted.Add(1)
					if lerr := l.Err(); lerr != nil {
						deadAtReturn.Add(1)
						if !errors.Is(lerr, ErrLockLost) {
							failures.Store(lerr.Error(), true)
						}
					}
					l.Release()
				case errors.Is(err, ErrLockLost):
					lostGranted.Add(1) // granted and lost before the hand-over: told
				}
			}
		})
	}
	wg.Wait()
	failures.Range(func(k, _ any) bool {
		t.Errorf("Acquire returned a dead Lock whose error does not wrap ErrLockLost: %v", k)
		return true
	})
	t.Logf("%d tries: %d locks returned (%d of them dead at return), %d granted-then-lost errors (wrapping ErrLockLost)",
		tries, granted.Load(), deadAtReturn.Load(), lostGranted.Load())
	if granted.Load() == 0 {
		t.Fatal("no Acquire succeeded: the server's timing never hit before the deadline, so the race was not exercised")
	}
}

// pushNearDeadline plays the server of one session: WAITING to the
// ACQUIRE, then ACQUIRED PUSH=1 at timeout ± 0.5 ms after the ACQUIRE was
// read, then it answers each heartbeat with ACQUIRED until the client
// closes.
func pushNearDeadline(conn net.Conn, timeout time.Duration) {
	defer conn.Close()
	var h [wire.HeaderSize]byte
	var p [wire.MaxFrame]byte
	readFrame := func() bool {
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			return false
		}
		hdr, err := wire.ParseHeader(h[:])
		if err != nil {
			return false
		}
		_, err = io.ReadFull(conn, p[:hdr.Length])
		return err == nil
	}
	if !readFrame() {
		return
	}
	readAt := time.Now()
	if _, err := conn.Write(wire.AppendWaiting(nil, 1)); err != nil {
		return
	}
	jitter := time.Duration(rand.Int64N(int64(time.Millisecond))) - 500*time.Microsecond
	time.Sleep(time.Until(readAt.Add(timeout + jitter)))
	const token = 7
	if _, err := conn.Write(wire.AppendAcquired(nil, true, token)); err != nil {
		return
	}
	for readFrame() {
		if _, err := conn.Write(wire.AppendAcquired(nil, false, token)); err != nil {
			return
		}
	}
}

// TestPushFollowedByErrorIsNoGrant: a promotion push that arrives together
// with the ERROR that ended the session right after it (a force-release
// just after the promotion, delivered at once by a slow link) never gives
// Acquire a Lock: the grant was over before the client saw it, and a Lock
// returned then would overlap the next holder's.
func TestPushFollowedByErrorIsNoGrant(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var serving sync.WaitGroup
	t.Cleanup(func() { ln.Close(); serving.Wait() })
	serving.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			serving.Go(func() {
				defer conn.Close()
				var h [wire.HeaderSize + wire.MaxFrame]byte
				if _, err := conn.Read(h[:]); err != nil {
					return
				}
				both := wire.AppendAcquired(nil, true, 9)
				both = wire.AppendError(both, wire.CodeForceReleased, "taken away")
				conn.Write(both) // one write: read together
				io.Copy(io.Discard, conn)
			})
		}
	})
	c, err := New([]string{ln.Addr().String()}, WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		l, err := c.Acquire(context.Background(), "pushed-and-taken")
		if err == nil {
			l.Release()
			t.Fatalf("try %d: Acquire returned a Lock (token %d) whose grant had already ended", i, l.Token())
		}
		if !errors.Is(err, ErrForceReleased) {
			t.Fatalf("try %d: %v, want ErrForceReleased", i, err)
		}
	}
}
