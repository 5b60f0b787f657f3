package server_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestVectors plays the server's side of every test vector of docs/protocol.md.
func TestVectors(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)

	// ACQUIRE v1, no flags, lease 2000 ms, name "jobs", no owner: granted
	// with an ACQUIRED reply; HEARTBEAT answered with the same token.
	h := batontest.Dial(t, ts.Addr)
	h.Write(unhex("01 00 0b 01 00 00 00 07 d0 04 6a 6f 62 73"))
	f := h.ReadFrame(frameWait)
	got := rawFrame(f)
	if want := unhex("82 00 09 00"); !bytes.Equal(got[:4], want) || len(got) != 12 {
		t.Fatalf("ACQUIRE vector answered % x, want % x + 8-byte token", got, want)
	}
	token := binary.BigEndian.Uint64(got[4:])
	if token == 0 {
		t.Fatal("token 0, want non-zero")
	}
	lv, ok := ts.Srv.Lock("jobs")
	if !ok || lv.Holder == nil || lv.Holder.Lease != 2000*time.Millisecond || lv.Holder.Owner != "" {
		t.Fatalf("Lock(jobs) = %+v, %v; want a holder with lease 2s and no owner", lv, ok)
	}
	h.Write(unhex("02 00 00"))
	f = h.ReadFrame(frameWait)
	if got, want := rawFrame(f), append(unhex("82 00 09 00"), got[4:]...); !bytes.Equal(got, want) {
		t.Fatalf("HEARTBEAT vector answered % x, want % x", got, want)
	}

	// WAITING position 3, byte for byte.
	queue(t, ts, "jobs", longLease, 1)
	queue(t, ts, "jobs", longLease, 2)
	w3 := batontest.Dial(t, ts.Addr)
	w3.Acquire("jobs", longLease, false, "")
	if got, want := rawFrame(w3.ReadFrame(frameWait)), unhex("81 00 05 00 00 00 00 03"); !bytes.Equal(got, want) {
		t.Fatalf("third waiter got % x, want % x", got, want)
	}

	// The ACQUIRED push: flags 01, a larger token.
	h2, _ := hold(t, ts, "push", longLease)
	w := queue(t, ts, "push", longLease, 1)
	h2.Conn.Close()
	got = rawFrame(w.ReadFrame(frameWait))
	if want := unhex("82 00 09 01"); !bytes.Equal(got[:4], want) || len(got) != 12 {
		t.Fatalf("push is % x, want % x + 8-byte token", got, want)
	}

	// ACQUIRE v1, NOWAIT, lease 1 ms, name "a", owner "h:1": on a held
	// lock, ERROR BUSY; on a free one, granted, and expired after 1 ms.
	holder, _ := hold(t, ts, "a", longLease)
	vector2 := unhex("01 00 0b 01 01 00 00 00 01 01 61 68 3a 31")
	busy := batontest.Dial(t, ts.Addr)
	busy.Write(vector2)
	f = busy.ReadFrame(frameWait)
	if got := rawFrame(f); got[0] != 0x80 || int(binary.BigEndian.Uint16(got[1:3])) != len(got)-3 || got[3] != 0x13 {
		t.Fatalf("NOWAIT on a held lock got % x, want ERROR 0x13 (BUSY)", got)
	}
	seenCodes.Store(wire.CodeBusy, struct{}{})
	busy.ExpectClosed(frameWait)
	holder.Conn.Close()
	batontest.Eventually(t, frameWait, func() bool { _, held := ts.Srv.Lock("a"); return !held }, "lock a still held after its holder closed")
	quick := batontest.Dial(t, ts.Addr)
	quick.Write(vector2)
	expectAcquired(t, quick)
	expectError(t, quick, wire.CodeLeaseExpired)

	// A header the server must refuse unread: 02 04 01 (length 1025).
	bad := batontest.Dial(t, ts.Addr)
	bad.Write(acquireFrame(1, 0, 2000, "x", ""))
	expectAcquired(t, bad)
	bad.Write(unhex("02 04 01"))
	expectError(t, bad, wire.CodeProtocol)
}

// TestProtocolErrors sends each malformed or refused request and checks
// its ERROR code, that the connection is closed after it, and that a
// holder of another lock is not disturbed.
func TestProtocolErrors(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	bystander, token := hold(t, ts, "bystander", longLease)

	valid := acquireFrame(1, 0, 10000, "lock", "me")
	name255 := strings.Repeat("n", 255)
	payload1025 := bytes.Repeat([]byte{0xAA}, 1025)
	tests := []struct {
		name    string
		first   bool   // send a valid ACQUIRE (and read its reply) first
		send    []byte // then this
		want    wire.Code
		replies int // ACQUIRED replies to send before the ERROR
	}{
		// The first frame.
		{"first frame HEARTBEAT", false, unhex("02 00 00"), wire.CodeProtocol, 0},
		{"first frame unknown type", false, unhex("03 00 00"), wire.CodeProtocol, 0},
		{"first frame a server type", false, unhex("82 00 09 00 00 00 00 00 00 00 00 01"), wire.CodeProtocol, 0},
		{"first frame oversize 02 04 01", false, unhex("02 04 01"), wire.CodeProtocol, 0},
		{"first frame oversize 01 04 01", false, unhex("01 04 01"), wire.CodeProtocol, 0},
		{"first frame oversize ff ff", false, unhex("01 ff ff"), wire.CodeProtocol, 0},
		{"oversize 02 04 01 with its 1025 bytes", false, append(unhex("02 04 01"), payload1025...), wire.CodeProtocol, 0},
		{"oversize 01 04 01 with its 1025 bytes", false, append(unhex("01 04 01"), payload1025...), wire.CodeProtocol, 0},
		{"ACQUIRE empty payload", false, unhex("01 00 00"), wire.CodeProtocol, 0},
		{"ACQUIRE payload of 6 bytes", false, unhex("01 00 06 01 00 00 00 07 d0"), wire.CodeProtocol, 0},
		{"ACQUIRE shorter than 7 + name_len", false, unhex("01 00 08 01 00 00 00 07 d0 05 61"), wire.CodeProtocol, 0},
		{"version 3", false, acquireFrame(3, 0, 2000, "lock", ""), wire.CodeVersion, 0},
		{"version 0", false, acquireFrame(0, 0, 2000, "lock", ""), wire.CodeVersion, 0},
		{"lease 0", false, acquireFrame(1, 0, 0, "lock", ""), wire.CodeBadRequest, 0},
		{"flag bit 1", false, acquireFrame(1, 0x02, 2000, "lock", ""), wire.CodeBadRequest, 0},
		{"flag bit 7 with NOWAIT", false, acquireFrame(1, 0x81, 2000, "lock", ""), wire.CodeBadRequest, 0},
		{"empty name", false, acquireFrame(1, 0, 2000, "", ""), wire.CodeBadRequest, 0},
		{"name with 0x7F", false, acquireFrame(1, 0, 2000, "lo\x7fck", ""), wire.CodeBadRequest, 0},
		{"name with a control byte", false, acquireFrame(1, 0, 2000, "lo\nck", ""), wire.CodeBadRequest, 0},
		{"name with NUL", false, acquireFrame(1, 0, 2000, "\x00", ""), wire.CodeBadRequest, 0},
		{"name not UTF-8", false, acquireFrame(1, 0, 2000, "lo\xffck", ""), wire.CodeBadRequest, 0},
		{"name with a cut rune", false, acquireFrame(1, 0, 2000, "lock\xc3", ""), wire.CodeBadRequest, 0},
		{"owner of 256 bytes", false, acquireFrame(1, 0, 2000, "lock", strings.Repeat("o", 256)), wire.CodeBadRequest, 0},
		{"owner with a control byte", false, acquireFrame(1, 0, 2000, "lock", "host\t1"), wire.CodeBadRequest, 0},
		{"owner with 0x7F", false, acquireFrame(1, 0, 2000, "lock", "host\x7f"), wire.CodeBadRequest, 0},
		{"owner not UTF-8", false, acquireFrame(1, 0, 2000, "lock", "h\xc0\xafst"), wire.CodeBadRequest, 0},
		// Later frames.
		{"second ACQUIRE", true, valid, wire.CodeProtocol, 0},
		{"second ACQUIRE, invalid too", true, acquireFrame(2, 0, 0, "", ""), wire.CodeProtocol, 0},
		{"unknown type", true, unhex("03 00 00"), wire.CodeProtocol, 0},
		{"unknown type with payload", true, unhex("7f 00 02 00 00"), wire.CodeProtocol, 0},
		{"a server type", true, unhex("81 00 05 00 00 00 00 01"), wire.CodeProtocol, 0},
		{"HEARTBEAT with payload", true, unhex("02 00 01 00"), wire.CodeProtocol, 0},
		{"HEARTBEAT announcing a payload never sent", true, unhex("02 00 10"), wire.CodeProtocol, 0},
		{"oversize 02 04 01", true, unhex("02 04 01"), wire.CodeProtocol, 0},
		{"oversize 01 04 01", true, unhex("01 04 01"), wire.CodeProtocol, 0},
		{"oversize 02 04 01 with its 1025 bytes", true, append(unhex("02 04 01"), payload1025...), wire.CodeProtocol, 0},
		{"oversize 01 04 01 with its 1025 bytes", true, append(unhex("01 04 01"), payload1025...), wire.CodeProtocol, 0},
		{"garbage after heartbeats", true, append(heartbeats(3), 0xEE, 0, 0), wire.CodeProtocol, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := batontest.Dial(t, ts.Addr)
			if tt.first { // a lock of its own: the last case's may not be free yet
				c.Write(acquireFrame(1, 0, 10000, "lock/"+tt.name, "me"))
				expectAcquired(t, c)
			}
			c.Write(tt.send)
			for range tt.replies {
				expectAcquired(t, c)
			}
			e := expectError(t, c, tt.want)
			if e.Msg == "" {
				t.Errorf("ERROR %v has no message", tt.want)
			}
			c.Conn.Close()
			expectHolds(t, bystander, token)
		})
	}

	// The boundaries that are allowed.
	t.Run("longest name and owner", func(t *testing.T) {
		c := batontest.Dial(t, ts.Addr)
		c.Write(acquireFrame(1, 0, 2000, name255, strings.Repeat("o", 255)))
		expectAcquired(t, c)
		c.Write(acquireFrame(1, 0, 2000, "lock/ünïcode ✓", "héllo:1"))
		expectError(t, c, wire.CodeProtocol) // a second ACQUIRE, however valid
	})
	t.Run("largest lease", func(t *testing.T) {
		c := batontest.Dial(t, ts.Addr)
		c.Write(acquireFrame(1, 0, 0xFFFFFFFF, "maxlease", ""))
		tok := expectAcquired(t, c)
		expectHolds(t, c, tok)
	})
	t.Run("unicode name", func(t *testing.T) {
		c := batontest.Dial(t, ts.Addr)
		c.Write(acquireFrame(1, 0, 2000, "jobs/ünïcode ✓ %2F", "h:1"))
		expectAcquired(t, c)
		if _, ok := ts.Srv.Lock("jobs/ünïcode ✓ %2F"); !ok {
			t.Fatal("Lock(unicode name) not found")
		}
	})
}

// TestOversizeHeaderNotRead checks that the refusal of an oversize header
// does not wait for its payload: the ERROR comes although the payload is
// never sent.
func TestOversizeHeaderNotRead(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t) // io-timeout 5s: an ERROR within it is not a read timeout
	for _, hdr := range []string{"02 04 01", "01 04 01"} {
		c := batontest.Dial(t, ts.Addr)
		start := time.Now()
		c.Write(unhex(hdr))
		expectErrorWithin(t, c, wire.CodeProtocol, 2*time.Second)
		if d := time.Since(start); d >= 2*time.Second {
			t.Fatalf("%s: ERROR after %v: the server waited for the payload", hdr, d)
		}
	}
}

// TestProtocolErrorOfHolderHandsOver: a holder ended by its own protocol
// error releases the lock at once, and its waiter's queue mate moves up.
func TestProtocolErrorOfHolderHandsOver(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	h, tok := hold(t, ts, "p", longLease)
	w1 := queue(t, ts, "p", longLease, 1)
	w2 := queue(t, ts, "p", longLease, 2)
	h.Write(unhex("02 00 01 00"))
	expectError(t, h, wire.CodeProtocol)
	tok1 := expectPush(t, w1, frameWait)
	if tok1 <= tok {
		t.Fatalf("push token %d, want > %d", tok1, tok)
	}
	// A waiter's protocol error takes it out of the queue.
	w2.Write(unhex("05 00 00"))
	expectError(t, w2, wire.CodeProtocol)
	w3 := queue(t, ts, "p", longLease, 1)
	w1.Conn.Close()
	if tok3 := expectPush(t, w3, frameWait); tok3 <= tok1 {
		t.Fatalf("push token %d, want > %d", tok3, tok1)
	}
}

// TestFramesWithTheAcquire: what a client sends in the same write as its
// ACQUIRE (the server reads the first frame with one read where it can) is
// answered after it, in order, for short and long ACQUIREs, whole frames
// and a frame split across the ACQUIRE's write and the next.
func TestFramesWithTheAcquire(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, ioTimeout(time.Second))
	long := strings.Repeat("o", wire.MaxOwner)
	for _, tt := range []struct{ name, owner string }{{"with-short", "o"}, {strings.Repeat("n", wire.MaxName), long}} {
		c := batontest.Dial(t, ts.Addr)
		hb := wire.AppendHeartbeat(nil)
		first := append(acquireFrame(1, 0, 10000, tt.name, tt.owner), heartbeats(3)...)
		c.Write(append(first, hb[:1]...)) // and the first byte of a fourth
		tok := expectAcquired(t, c)
		for range 3 {
			if got := expectAcquired(t, c); got != tok {
				t.Fatalf("%s: token %d, want %d", tt.name[:4], got, tok)
			}
		}
		c.Write(hb[1:])
		if got := expectAcquired(t, c); got != tok {
			t.Fatalf("%s: token %d after the split heartbeat, want %d", tt.name[:4], got, tok)
		}
		// A waiter's extra frames are answered WAITING.
		w := batontest.Dial(t, ts.Addr)
		w.Write(append(acquireFrame(1, 0, 10000, tt.name, tt.owner), heartbeats(2)...))
		for range 3 {
			expectWaiting(t, w, 1)
		}
		c.Conn.Close()
		if got := expectPush(t, w, frameWait); got <= tok {
			t.Fatalf("push token %d, want > %d", got, tok)
		}
		w.Conn.Close()
	}
}

// TestSplitFramesAccepted: frames may arrive in pieces, within io-timeout.
func TestSplitFramesAccepted(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, ioTimeout(time.Second))
	c := batontest.Dial(t, ts.Addr)
	acq := acquireFrame(1, 0, 10000, "split", "o")
	for _, b := range acq { // byte by byte
		c.Write([]byte{b})
	}
	tok := expectAcquired(t, c)
	for range 3 {
		for _, b := range wire.AppendHeartbeat(nil) {
			c.Write([]byte{b})
			time.Sleep(time.Millisecond) // give the server a chance to see a short read
		}
		if got := expectAcquired(t, c); got != tok {
			t.Fatalf("token %d, want %d", got, tok)
		}
	}
	// Many frames in one write are answered one each, in order.
	c.Write(heartbeats(50))
	for range 50 {
		if got := expectAcquired(t, c); got != tok {
			t.Fatalf("token %d, want %d", got, tok)
		}
	}
}

// TestRandomFrames throws random and truncated frames at the server from
// many goroutines for 2 s while a holder heartbeats: the holder keeps its
// lock and token, its waiter keeps its place and is promoted afterwards.
func TestRandomFrames(t *testing.T) {
	ts := batontest.StartServer(t, ioTimeout(300*time.Millisecond))
	h, tok := hold(t, ts, "robust", 10*time.Second)
	w := queue(t, ts, "robust", 10*time.Second, 1)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var conns atomic.Int64
	for i := range 8 {
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
				if garbageSession(ts.Addr, rng) {
					conns.Add(1)
				}
			}
		}()
	}
	defer func() { // also on a failure below
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		expectHolds(t, h, tok)
		expectQueued(t, w, 1)
		time.Sleep(20 * time.Millisecond) // the heartbeat schedule
	}
	close(stop)
	wg.Wait()
	if n := conns.Load(); n < 100 {
		t.Fatalf("only %d garbage connections in 2s; the test proves little", n)
	}
	t.Logf("%d garbage connections", conns.Load())
	if n := metric(t, ts.Srv.Registry(), "baton_protocol_errors_total", "code=PROTOCOL"); n == 0 {
		t.Fatal("no PROTOCOL errors counted: the garbage did not reach the server")
	}

	expectHolds(t, h, tok)
	h.Conn.Close()
	if tok2 := expectPush(t, w, frameWait); tok2 <= tok {
		t.Fatalf("push token %d, want > %d", tok2, tok)
	}
}

// garbageSession runs one connection of TestRandomFrames: it sends
// something random, maybe reads a little, and closes or resets. Every step
// has a deadline. It reports whether it connected.
func garbageSession(addr string, rng *rand.Rand) bool {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(500 * time.Millisecond))
	var b []byte
	switch rng.IntN(7) {
	case 0: // random bytes
		b = make([]byte, 1+rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	case 1: // a random header with a random (maybe oversize) length
		b = []byte{byte(rng.IntN(4)), byte(rng.IntN(8)), byte(rng.Uint32())}
	case 2: // a truncated ACQUIRE
		a := acquireFrame(1, 0, 1000, "robust", "g")
		b = a[:rng.IntN(len(a))]
	case 3: // an ACQUIRE with random fields, then random frames
		name := []string{"robust", "other", "", "x\x01", "\xff"}[rng.IntN(5)]
		b = acquireFrame(byte(rng.IntN(3)), byte(rng.IntN(4)), rng.Uint32N(3000), name, "g")
		for range rng.IntN(4) {
			b = append(b, byte(rng.IntN(4)), 0, byte(rng.IntN(3)))
		}
	case 4: // a valid NOWAIT on the held lock: BUSY
		b = acquireFrame(1, wire.FlagNoWait, 1000, "robust", "g")
	case 5: // an oversize header with its payload
		b = append(unhex("02 04 01"), make([]byte, 1025)...)
	case 6: // a valid ACQUIRE of another lock, then a second ACQUIRE
		b = append(acquireFrame(1, 0, 1000, "other", "g"), acquireFrame(1, 0, 1000, "robust", "g")...)
	}
	if rng.IntN(2) == 0 && len(b) > 1 { // in two writes
		cut := rng.IntN(len(b))
		nc.Write(b[:cut])
		nc.Write(b[cut:])
	} else {
		nc.Write(b)
	}
	switch rng.IntN(3) {
	case 0: // read a little
		var buf [64]byte
		nc.Read(buf[:])
	case 1: // reset
		nc.(*net.TCPConn).SetLinger(0)
	}
	return true
}

// TestClosedAfterErrorDespiteLateFrame: after its ERROR the server closes
// the connection within its linger (at most 1s), also when the client
// completes a frame it had begun before the ERROR and then neither reads
// nor closes. (The reader finishing that frame must not lift the linger
// deadline.)
func TestClosedAfterErrorDespiteLateFrame(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, ioTimeout(2*time.Second))
	reg := ts.Srv.Registry()
	h, _ := hold(t, ts, "late", longLease)
	h.Write([]byte{0x02}) // a heartbeat begun...
	if _, err := ts.Srv.ForceRelease("late"); err != nil {
		t.Fatal(err)
	}
	expectError(t, h, wire.CodeForceReleased)
	// The EOF comes just before the server sets its linger deadline; the
	// pause puts the late bytes after that, where they did harm (without
	// it the test still passes, it only catches a regression less often).
	time.Sleep(20 * time.Millisecond)
	h.Write([]byte{0x00, 0x00}) // ...and completed after the ERROR
	start := time.Now()
	eventuallyMetric(t, reg, "baton_connections", "", 0)
	t.Logf("closed %v after the frame was completed", time.Since(start))
}
