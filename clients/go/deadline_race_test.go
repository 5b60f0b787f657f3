package baton

import (
	"context"
	"errors"
	"fmt"
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
// WAITING and then pushes ACQUIRED at the client's own deadline: the
// test's dialer sees when the client wrote its ACQUIRE (its deadline is
// 0.8 × lease after that write) and when the push reached it, and the
// server aims each push at that deadline less the delivery time it has
// seen, with a jitter of a few hundred microseconds either side. So the
// pushes land on both sides of the deadline whatever the machine's load,
// and the race between the reader's hand-off of the grant and the
// deadline's timer is hit many times; a run in which either side is hit
// too rarely fails, since it did not test the race.
func TestPushAtTheDeadline(t *testing.T) {
	const (
		lease   = 10 * time.Millisecond
		timeout = lease * 8 / 10
		tries   = 1000
		workers = 16
		// minSide is how many pushes must land on each side of the
		// deadline.
		minSide = tries / 10
		// minNear is how many must land within 100µs of it (some 100 do
		// beside a busy machine).
		minNear = 10
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aim := newDeadlineAim(timeout)
	var serving sync.WaitGroup
	t.Cleanup(func() { ln.Close(); serving.Wait() })
	serving.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			serving.Go(func() { pushAtDeadline(conn, aim) })
		}
	})

	c, err := New([]string{ln.Addr().String()}, WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	c.dial = aim.dial
	var granted, deadAtReturn, lostGranted atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	for w := range workers {
		name := fmt.Sprintf("race-%d", w) // one name per worker: a Client refuses a second claim of its own
		wg.Go(func() {
			for range tries / workers {
				ctx, cancel := context.WithTimeout(context.Background(), 20*lease)
				l, err := c.Acquire(ctx, name)
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
	early, late, near := aim.counts()
	t.Logf("%d tries: %d locks returned (%d of them dead at return), %d granted-then-lost errors (wrapping ErrLockLost); "+
		"%d pushes before the client's deadline, %d after it or never read, %d within 100µs of it; delivery %v on average",
		tries, granted.Load(), deadAtReturn.Load(), lostGranted.Load(), early, late, near, aim.delivery())
	if early < minSide || late < minSide || granted.Load() < minSide || near < minNear {
		t.Fatalf("%d pushes before the deadline (%d locks returned), %d after it, %d within 100µs of it: want at least %d of each side and %d at it, or the race was not exercised",
			early, granted.Load(), late, near, minSide, minNear)
	}
}

// deadlineAim is the test's view of the client's clock: the dialer wraps
// each connection to note when the client wrote its ACQUIRE (the client's
// deadline is timeout after that write, as it counts it) and when the push
// reached it; the server side, in the same process, finds the connection
// by its address and aims its push at that deadline plus a jitter. A
// correction learnt from where the pushes landed takes off what the aim
// does not see: the delivery, and how late the server's sleep ends.
type deadlineAim struct {
	timeout time.Duration
	conns   sync.Map // client's local address -> *aimedConn

	mu sync.Mutex
	// correction is added to each push's aim: the average error of the
	// pushes before, with the sign reversed.
	correction        time.Duration
	early, late, near int
	samples           int
	deliveries        time.Duration
}

func newDeadlineAim(timeout time.Duration) *deadlineAim {
	return &deadlineAim{timeout: timeout}
}

func (a *deadlineAim) dial(ctx context.Context, addr string, set *settings) (net.Conn, net.Conn, error) {
	conn, raw, err := dialTCP(ctx, addr, set)
	if err != nil {
		return nil, nil, err
	}
	ac := &aimedConn{Conn: conn, wrote: make(chan struct{})}
	a.conns.Store(raw.LocalAddr().String(), ac)
	return ac, raw, nil
}

// aimedConn notes the client's first write (its ACQUIRE) and the arrival
// of the bytes past the WAITING frame (the push).
type aimedConn struct {
	net.Conn
	once    sync.Once
	wrote   chan struct{} // closed at the first write
	writeAt time.Time
	read    int
	pushAt  atomic.Int64 // unix ns of the push's arrival; 0: not yet
}

var waitingLen = len(wire.AppendWaiting(nil, 1))

func (c *aimedConn) Write(b []byte) (int, error) {
	c.once.Do(func() { c.writeAt = time.Now(); close(c.wrote) }) // as the client's sentAt, a moment before the write
	return c.Conn.Write(b)
}

func (c *aimedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.read += n
		if c.read > waitingLen && c.pushAt.Load() == 0 {
			c.pushAt.Store(time.Now().UnixNano())
		}
	}
	return n, err
}

// aimJitter spreads the pushes around the deadline, either side.
const aimJitter = 300 * time.Microsecond

// target is when the server should write the push of the session on conn
// (server side), and where it means the push to land: the client's
// deadline plus a jitter.
func (a *deadlineAim) target(conn net.Conn) (ac *aimedConn, writeAt, landAt time.Time, ok bool) {
	v, ok := a.conns.Load(conn.RemoteAddr().String())
	if !ok {
		return nil, time.Time{}, time.Time{}, false
	}
	ac = v.(*aimedConn)
	<-ac.wrote // the server has read the ACQUIRE: it was written
	a.mu.Lock()
	corr := a.correction
	a.mu.Unlock()
	landAt = ac.writeAt.Add(a.timeout + time.Duration(rand.Int64N(int64(2*aimJitter))) - aimJitter)
	return ac, landAt.Add(corr), landAt, true
}

// outcome records where the push written at wroteAt, meant to land at
// landAt, landed, once the client has closed the connection, and moves
// the correction by an eighth of the error (a push the client never read
// came too late: by a step).
func (a *deadlineAim) outcome(ac *aimedConn, wroteAt, landAt time.Time) {
	a.conns.Delete(ac.LocalAddr().String())
	deadline := ac.writeAt.Add(a.timeout)
	a.mu.Lock()
	defer a.mu.Unlock()
	ns := ac.pushAt.Load()
	if ns == 0 {
		a.late++
		a.correction -= 50 * time.Microsecond
		return
	}
	at := time.Unix(0, ns)
	a.samples++
	a.deliveries += at.Sub(wroteAt)
	a.correction -= at.Sub(landAt) / 8
	if at.Before(deadline) {
		a.early++
	} else {
		a.late++
	}
	if m := at.Sub(deadline); m > -100*time.Microsecond && m < 100*time.Microsecond {
		a.near++
	}
}

func (a *deadlineAim) counts() (early, late, near int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.early, a.late, a.near
}

func (a *deadlineAim) delivery() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.samples == 0 {
		return 0
	}
	return (a.deliveries / time.Duration(a.samples)).Round(time.Microsecond)
}

// pushAtDeadline plays the server of one session: WAITING to the
// ACQUIRE, then ACQUIRED PUSH=1 at aim's target, then it answers each
// heartbeat with ACQUIRED until the client closes, and tells aim where the
// push landed.
func pushAtDeadline(conn net.Conn, aim *deadlineAim) {
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
	ac, at, landAt, ok := aim.target(conn)
	if !ok {
		return
	}
	if _, err := conn.Write(wire.AppendWaiting(nil, 1)); err != nil {
		return
	}
	time.Sleep(time.Until(at))
	const token = 7
	wroteAt := time.Now()
	if _, err := conn.Write(wire.AppendAcquired(nil, true, token)); err != nil {
		return
	}
	for readFrame() {
		if _, err := conn.Write(wire.AppendAcquired(nil, false, token)); err != nil {
			break
		}
	}
	aim.outcome(ac, wroteAt, landAt)
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
