package reliability

import (
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

// TestHostileInput: 64 connections at a time throw random bytes, truncated
// and oversize frames, wrong first frames, bad ACQUIREs and silence at the
// real server for 2 s, while legitimate holders of three locks heartbeat
// and their waiters wait. The holders keep their locks and tokens, every
// heartbeat is answered, no waiter is promoted, no garbage connection is
// granted a held lock, and the server keeps granting free locks at once.
// Afterwards the waiters are promoted in order with larger tokens.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	const (
		ioTimeout = 300 * time.Millisecond
		lease     = 10 * time.Second // the heartbeats below are far more frequent
		conns     = 64
		runFor    = 2 * time.Second
	)
	srv := startServer(t, t.TempDir(), "-io-timeout="+ioTimeout.String())
	type legit struct {
		name    string
		holder  *rawConn
		token   uint64
		waiters []*rawConn
	}
	var locks []*legit
	for i := range 3 {
		l := &legit{name: fmt.Sprintf("hostile-%d", i)}
		l.holder, l.token = hold(t, srv.Addr, l.name, lease)
		for p := range 2 {
			l.waiters = append(l.waiters, queue(t, srv.Addr, l.name, lease, uint32(p+1)))
		}
		locks = append(locks, l)
	}
	names := []string{locks[0].name, locks[1].name, locks[2].name}

	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		sessions atomic.Int64
		mu       sync.Mutex
		granted  []string // garbage granted a legitimate lock: must stay empty
	)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if what, ok := garbage(srv.Addr, rng, names, ioTimeout); ok {
					sessions.Add(1)
				} else if what != "" {
					mu.Lock()
					granted = append(granted, what)
					mu.Unlock()
				}
			}
		}()
	}
	stopGarbage := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopGarbage() // also on a failure below

	rounds := 0
	for end := time.Now().Add(runFor); time.Now().Before(end); rounds++ {
		for _, l := range locks {
			l.holder.expectHolds(t, l.token)
			for p, w := range l.waiters {
				if f := w.heartbeat(t); f.typ != wire.TypeWaiting || f.pos != uint32(p+1) {
					t.Fatalf("waiter %d of %q: got %v, want WAITING %d", p+1, l.name, f, p+1)
				}
			}
		}
		// A free lock is granted at once, whatever the garbage does.
		fresh := dialRaw(t, srv.Addr)
		fresh.send(t, acquireFrame(t, fmt.Sprintf("fresh-%d", rounds), lease, true))
		if f := fresh.expect(t, eventWait); f.typ != wire.TypeAcquired {
			t.Fatalf("ACQUIRE of a free lock during the garbage: got %v, want ACQUIRED", f)
		}
		fresh.Close()
		time.Sleep(100 * time.Millisecond) // a heartbeat schedule
	}
	stopGarbage()
	for _, g := range granted {
		t.Error(g)
	}
	if n := sessions.Load(); n < 200 {
		t.Errorf("only %d garbage connections in %v; the test proves little", n, runFor)
	}
	if n := srv.metric(t, `baton_protocol_errors_total{code="PROTOCOL"}`); n == 0 {
		t.Error("no PROTOCOL errors counted: the garbage did not reach the server")
	}
	for _, l := range locks {
		l.holder.expectHolds(t, l.token)
		l.holder.Close()
		tok := l.waiters[0].expectPush(t, eventWait)
		if tok <= l.token {
			t.Errorf("%q: promoted waiter's token %d, want more than %d", l.name, tok, l.token)
		}
		if f := l.waiters[1].heartbeat(t); f.typ != wire.TypeWaiting || f.pos != 1 {
			t.Errorf("%q: second waiter got %v, want WAITING 1", l.name, f)
		}
	}
	t.Logf("%d garbage connections (%d at a time) in %v; %d rounds of heartbeats all answered; protocol errors %v, read timeouts %v",
		sessions.Load(), conns, runFor, rounds,
		srv.metric(t, `baton_protocol_errors_total{code="PROTOCOL"}`),
		srv.metric(t, `baton_sessions_ended_total{reason="read_timeout"}`))
}

// garbage runs one hostile connection. It reports whether it connected,
// and describes a violation (a held lock granted to it) if it saw one.
func garbage(addr string, rng *rand.Rand, held []string, ioTimeout time.Duration) (string, bool) {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", false
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(ioTimeout + time.Second))
	acq := func(version, flags byte, leaseMs uint32, name string) []byte {
		p := []byte{version, flags, byte(leaseMs >> 24), byte(leaseMs >> 16), byte(leaseMs >> 8), byte(leaseMs), byte(len(name))}
		p = append(p, name...)
		return append([]byte{byte(wire.TypeAcquire), byte(len(p) >> 8), byte(len(p))}, p...)
	}
	heldName := held[rng.IntN(len(held))]
	var b []byte
	waitClose := false // the server must cut it at io-timeout
	mayGrant := false  // a valid ACQUIRE of a held lock: never ACQUIRED
	switch rng.IntN(11) {
	case 0: // random bytes
		b = make([]byte, 1+rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	case 1: // a random header, perhaps oversize
		b = []byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
	case 2: // a truncated ACQUIRE, then silence
		a := acq(1, 0, 1000, heldName)
		b, waitClose = a[:1+rng.IntN(len(a)-1)], true
	case 3: // an oversize header and its payload
		b = append([]byte{byte(wire.TypeHeartbeat), 0x04, 0x01}, make([]byte, 1025)...)
	case 4: // a wrong first frame: HEARTBEAT, or a server's frame
		b = [][]byte{wire.AppendHeartbeat(nil), {byte(wire.TypeAcquired), 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1}}[rng.IntN(2)]
	case 5: // bad ACQUIRE fields: version, flags, lease 0, names
		b = acq(byte(rng.IntN(3)), byte(rng.IntN(4)), rng.Uint32N(3), []string{"", "x\x01", "\xff\xfe", heldName}[rng.IntN(4)])
	case 6: // a valid ACQUIRE of a held lock, then a second ACQUIRE
		b, mayGrant = append(acq(1, 0, 1000, heldName), acq(1, 0, 1000, heldName)...), true
	case 7: // a valid NOWAIT of a held lock: BUSY
		b, mayGrant = acq(1, 1, 1000, heldName), true
	case 8: // connect and say nothing
		waitClose = true
	case 9: // 64 KiB of noise
		b = make([]byte, 64<<10)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	case 10: // a valid ACQUIRE of a held lock, then random frames
		b, mayGrant = acq(1, 0, 1000, heldName), true
		for range 1 + rng.IntN(4) {
			b = append(b, byte(rng.IntN(4)), 0, byte(rng.IntN(3)))
		}
	}
	if len(b) > 1 && rng.IntN(2) == 0 { // in two writes
		cut := 1 + rng.IntN(len(b)-1)
		nc.Write(b[:cut])
		nc.Write(b[cut:])
	} else if len(b) > 0 {
		nc.Write(b)
	}
	if mayGrant || waitClose || rng.IntN(2) == 0 {
		// Read what comes back until the server closes: never a grant of
		// a held lock.
		for {
			var hdr [wire.HeaderSize]byte
			if _, err := io.ReadFull(nc, hdr[:]); err != nil {
				var ne net.Error
				if waitClose && errors.As(err, &ne) && ne.Timeout() {
					return fmt.Sprintf("a silent or half-sent connection was not cut within io-timeout %v", ioTimeout), false
				}
				break
			}
			h, err := wire.ParseHeader(hdr[:])
			if err != nil {
				break
			}
			p := make([]byte, h.Length)
			if _, err := io.ReadFull(nc, p); err != nil {
				break
			}
			if h.Type == wire.TypeAcquired && mayGrant {
				return fmt.Sprintf("garbage connection granted %q, which a legitimate holder holds", heldName), false
			}
		}
	} else if rng.IntN(2) == 0 {
		nc.(*net.TCPConn).SetLinger(0) // reset
	}
	return "", true
}
