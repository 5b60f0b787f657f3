package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/server/internal/rawsock"
	"golang.org/x/sys/unix"
)

// TestRawAcceptSessions: a plain TCP server with the idle poller accepts
// with accept4; its connections carry TCP_NODELAY from the listener (a
// push must not wait for the ACK of the answer before it), serve a whole
// session, and Serve returns when the listener is closed by someone else.
//
// With a listener of its own (net.Listen, not Listen) and a client that
// connected before Serve, the connection still gets TCP_NODELAY.
func TestRawAcceptSessions(t *testing.T) {
	t.Run("Listen", func(t *testing.T) { testRawAccept(t, true) })
	t.Run("net.Listen", func(t *testing.T) { testRawAccept(t, false) })
}

func testRawAccept(t *testing.T, ownListen bool) {
	cfg := DefaultConfig()
	var next uint64
	cfg.NextToken = func() uint64 { next++; return next }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if ownListen {
		ln, err = Listen(t.Context(), cfg, "127.0.0.1:0")
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String()) // in the backlog before Serve
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer s.Shutdown(t.Context())
	frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: "raw"})
	c.Write(frame)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var reply [12]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil || wire.Type(reply[0]) != wire.TypeAcquired {
		t.Fatalf("reply % x, %v; want ACQUIRED", reply, err)
	}

	s.mu.Lock()
	var sc *rawsock.Conn
	for sess := range s.conns {
		conn := sess.conn
		if cc, ok := conn.(*countedConn); ok { // -max-conns-per-ip
			conn = cc.Conn
		}
		sc, _ = conn.(*rawsock.Conn)
	}
	s.mu.Unlock()
	if sc == nil {
		t.Fatal("the session's connection is not a *rawsock.Conn: accepted through net")
	}
	var nodelay int
	raw, _ := sc.SyscallConn()
	raw.Control(func(fd uintptr) { nodelay, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY) })
	if err != nil || nodelay != 1 {
		t.Fatalf("TCP_NODELAY %d, %v; want 1", nodelay, err)
	}

	ln.Close()
	select {
	case err := <-served:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Serve returned %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * s.acceptCheck):
		t.Fatal("Serve still running after its listener was closed")
	}
	// The session outlives its listener.
	c.Write(wire.AppendHeartbeat(nil))
	if _, err := io.ReadFull(c, reply[:]); err != nil || wire.Type(reply[0]) != wire.TypeAcquired {
		t.Fatalf("heartbeat reply % x, %v", reply, err)
	}
}

// TestAcceptBurst: connections that come in bursts while others end are
// all accepted and served: the raw accept loop takes them until the
// listener has none, and a wake-up missed would leave one in the backlog
// (its listener check, which would find it, is an hour away here). 16
// clients claim one lock 50 times each, half releasing by reset; every
// claim is granted, with distinct tokens.
func TestAcceptBurst(t *testing.T) {
	cfg := DefaultConfig()
	var next atomic.Uint64
	cfg.NextToken = func() uint64 { return next.Add(1) }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.acceptCheck = time.Hour
	ln, err := Listen(t.Context(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Shutdown(t.Context())

	const workers, claims, wait = 16, 50, 20 * time.Second
	frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: "burst"})
	claim := func(rst bool) (uint64, error) {
		nc, err := net.DialTimeout("tcp", ln.Addr().String(), wait)
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(wait))
		nc.Write(frame)
		for {
			var hdr [wire.HeaderSize]byte
			if _, err := io.ReadFull(nc, hdr[:]); err != nil {
				return 0, err
			}
			h, err := wire.ParseHeader(hdr[:])
			if err != nil {
				return 0, err
			}
			payload := make([]byte, h.Length)
			if _, err := io.ReadFull(nc, payload); err != nil {
				return 0, err
			}
			switch h.Type {
			case wire.TypeWaiting:
				continue
			case wire.TypeAcquired:
				_, tok, err := wire.DecodeAcquired(payload)
				if rst {
					nc.(*net.TCPConn).SetLinger(0)
				}
				return tok, err
			}
			return 0, fmt.Errorf("got %v", h.Type)
		}
	}
	tokens := make(chan uint64, workers*claims)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range claims {
				tok, err := claim((w+i)%2 == 0)
				if err != nil {
					errs <- fmt.Errorf("worker %d, claim %d: %w", w, i, err)
					return
				}
				tokens <- tok
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(tokens)
	seen := make(map[uint64]bool)
	for tok := range tokens {
		if seen[tok] {
			t.Fatalf("token %d granted twice", tok)
		}
		seen[tok] = true
	}
	if len(seen) != workers*claims {
		t.Fatalf("%d grants, want %d", len(seen), workers*claims)
	}
}

// TestAcceptRefusesAtTheDoorWhenFull: with every descriptor of the
// process in use but the server's own spares, a new connection is refused
// at the door at once (one of those spares is lent to accept and close
// it), not left in the backlog; the server's own spares are never given
// to a session; once descriptors are free, new connections are served.
// The server runs in a child process (this test again), whose descriptor
// limit it lowers.
func TestAcceptRefusesAtTheDoorWhenFull(t *testing.T) {
	if loop := os.Getenv("BATON_TEST_EMFILE_CHILD"); loop != "" {
		emfileChild(t, loop == "raw")
		return
	}
	// Both accept loops: accept4's own (accept_raw_linux.go), and net's.
	for _, loop := range []string{"raw", "net"} {
		t.Run(loop, func(t *testing.T) { testRefusesAtTheDoor(t, loop) })
	}
}

func testRefusesAtTheDoor(t *testing.T, loop string) {
	child := startChild(t, "TestAcceptRefusesAtTheDoorWhenFull", "BATON_TEST_EMFILE_CHILD="+loop)
	logs := child.Logs
	addr := child.Addr(t)

	acquire := func(name string) net.Conn {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		frame, _ := wire.AppendAcquire(nil, wire.Acquire{Version: wire.Version, LeaseMs: 30000, Name: name})
		nc.Write(frame)
		return nc
	}
	granted := func(nc net.Conn, within time.Duration) error {
		nc.SetReadDeadline(time.Now().Add(within))
		var reply [12]byte
		if _, err := io.ReadFull(nc, reply[:]); err != nil {
			return err
		}
		if wire.Type(reply[0]) != wire.TypeAcquired {
			return fmt.Errorf("reply % x, want ACQUIRED", reply)
		}
		return nil
	}
	// The child has room for a few connections (emfileRoom, give or take
	// what it had open besides): claim until one is not served.
	var held []net.Conn
	for i := 0; ; i++ {
		if i == 20 {
			t.Fatalf("20 connections served: the child never ran out of descriptors; %s", logs)
		}
		nc := acquire(fmt.Sprint("held-", i))
		err := granted(nc, 5*time.Second)
		if err == nil {
			held = append(held, nc)
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection %d with no descriptor free: not answered within 5 s (%v), want it refused at the door; %s", i, err, logs)
		}
		break // refused: closed unanswered
	}
	if len(held) < emfileRoom-1 {
		t.Fatalf("%d connections served, want %d or so: the server's own spares went to sessions? %s", len(held), emfileRoom, logs)
	}
	if err := granted(acquire("late"), 5*time.Second); err == nil {
		t.Fatalf("a connection served with no descriptor free; %s", logs)
	}
	for _, nc := range held {
		nc.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); granted(acquire("after"), 5*time.Second) != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("no connection served once descriptors were free; %s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "session refused at the door") {
		t.Fatalf("no refusal logged: %s", logs)
	}
}

// emfileRoom is how many connections the child of
// TestAcceptRefusesAtTheDoorWhenFull has descriptors for.
const emfileRoom = 3

func emfileChild(t *testing.T, raw bool) {
	cfg := DefaultConfig()
	cfg.ParkIdle = raw // without the idle poller, net's accept
	cfg.ReserveFDs = 0 // the server's own spares only; the listener's have their own test
	// One session first (childServer), so that whatever the server opens
	// once is open.
	s, ln, nc := childServer(t, cfg)
	// The client's half-close ends the session; the server's FIN comes
	// after it has closed its end.
	nc.(*net.TCPConn).CloseWrite()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	// ReadDir's own descriptor is closed again: len(fds)-1 are open.
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	lim.Cur = uint64(len(fds) - 1 + emfileRoom)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	awaitParent(ln)
	s.Shutdown(t.Context())
}
