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
	"golang.org/x/sys/unix"
)

// sockPair returns a sockConn accepted with accept4, as serveRaw makes
// them, and the client's end.
func sockPair(t *testing.T) (*sockConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	raw, _ := ln.(*net.TCPListener).SyscallConn()
	var fd int
	var sa unix.Sockaddr
	raw.Control(func(lfd uintptr) {
		for {
			fd, sa, err = unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != unix.EAGAIN && err != unix.EINTR {
				return
			}
			// Wait for the connection to reach the backlog.
			unix.Poll([]unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}}, 5000)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sc := &sockConn{fd: fd, remote: sockaddrTCP(sa)}
	t.Cleanup(func() { sc.Close() })
	return sc, client
}

// expectEOF reads c until the connection's end, within five seconds.
func expectEOF(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [16]byte
	if n, err := c.Read(b[:]); err != io.EOF {
		t.Fatalf("read %d bytes, %v; want EOF", n, err)
	}
}

// TestSockConnCloseWaitsForUse: a Close while the descriptor is in use
// (the handover's push written from another goroutine) is carried out when
// that use ends, so the descriptor's number cannot be reused under it;
// after the Close, nothing uses it.
func TestSockConnCloseWaitsForUse(t *testing.T) {
	sc, client := sockPair(t)
	if got := sc.RemoteAddr().String(); got != client.LocalAddr().String() {
		t.Fatalf("RemoteAddr %s, want %s", got, client.LocalAddr())
	}
	if got := sc.LocalAddr().String(); got != client.RemoteAddr().String() {
		t.Fatalf("LocalAddr %s, want %s", got, client.RemoteAddr())
	}
	raw := sc.rawConn()
	inUse, closed := make(chan struct{}), make(chan error)
	go func() {
		raw.Control(func(fd uintptr) {
			close(inUse)
			<-closed // Close has returned: the descriptor must still be ours
			if _, err := unix.Write(int(fd), []byte("ok")); err != nil {
				t.Errorf("write after a Close during the use: %v", err)
			}
		})
	}()
	<-inUse
	err := sc.Close()
	closed <- err
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [2]byte
	if _, err := io.ReadFull(client, b[:]); err != nil || string(b[:]) != "ok" {
		t.Fatalf("client read %q, %v", b, err)
	}
	expectEOF(t, client) // the use's end closed it
	if err := raw.Control(func(uintptr) { t.Error("Control ran after Close") }); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Control after Close: %v, want net.ErrClosed", err)
	}
	if _, err := sc.Read(b[:]); ioCause(err) != net.ErrClosed {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	if err := sc.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// TestSockConnPollable: the first blocking call hands the descriptor to
// the runtime poller, and errors come as net's connections give them
// (readFailure and writeFailed classify them).
func TestSockConnPollable(t *testing.T) {
	sc, client := sockPair(t)
	var b [8]byte

	// Without waiting: nothing to read yet.
	var n int
	var rerr error
	if err := sc.rawConn().Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), b[:])
		return true
	}); err != nil || rerr != unix.EAGAIN {
		t.Fatalf("raw read: %v, %v; want EAGAIN", err, rerr)
	}
	if sc.file != nil {
		t.Fatal("a read that did not wait made the descriptor pollable")
	}

	// A deadline, a wait.
	sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := sc.Read(b[:]); ioCause(err) != os.ErrDeadlineExceeded {
		t.Fatalf("Read past its deadline: %v", err)
	}
	var ne net.Error
	if _, err := sc.Read(b[:]); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline: %v, want a net.Error that times out", err)
	}
	sc.SetReadDeadline(time.Time{})
	go client.Write([]byte("hi"))
	if n, err := sc.Read(b[:]); err != nil || string(b[:n]) != "hi" {
		t.Fatalf("Read: %q, %v", b[:n], err)
	}

	// A raw read that asks to wait waits in the runtime poller: the client
	// writes only once the first call has found nothing.
	calls := 0
	if err := sc.rawConn().Read(func(fd uintptr) bool {
		calls++
		n, rerr = unix.Read(int(fd), b[:])
		if rerr == unix.EAGAIN && calls == 1 {
			go client.Write([]byte("yo"))
		}
		return rerr != unix.EAGAIN
	}); err != nil || rerr != nil || string(b[:n]) != "yo" || calls < 2 {
		t.Fatalf("raw read with a wait: %v, %v, %q after %d calls", err, rerr, b[:n], calls)
	}

	// Half-close: the client reads our FIN and can still write.
	if _, err := sc.Write([]byte("bye")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := sc.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(client); err != nil || string(got) != "bye" {
		t.Fatalf("client read %q, %v; want bye and EOF", got, err)
	}
	client.Write([]byte("!"))
	sc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := sc.Read(b[:]); err != nil || string(b[:n]) != "!" {
		t.Fatalf("Read after CloseWrite: %q, %v", b[:n], err)
	}

	// The client's close is EOF; its reset is ECONNRESET.
	client.(*net.TCPConn).SetLinger(0)
	client.Close()
	sc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := sc.Read(b[:]); ioCause(err) != syscall.ECONNRESET {
		t.Fatalf("Read after the client's reset: %v, want ECONNRESET", err)
	}
}

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
	var sc *sockConn
	for sess := range s.conns {
		conn := sess.conn
		if cc, ok := conn.(*countedConn); ok { // -max-conns-per-ip
			conn = cc.Conn
		}
		sc, _ = conn.(*sockConn)
	}
	s.mu.Unlock()
	if sc == nil {
		t.Fatal("the session's connection is not a sockConn: accepted through net")
	}
	var nodelay int
	sc.rawConn().Control(func(fd uintptr) { nodelay, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY) })
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
	// Both accept loops: accept4's own (sock_linux.go), and net's.
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

// TestSockaddrTCP: the raw accept names a client as net's accept would
// (an IPv4 client of a dual-stack listener comes as a v4-mapped address,
// which net prints as IPv4, and the per-address cap counts as IPv4).
func TestSockaddrTCP(t *testing.T) {
	for _, tc := range []struct {
		sa   unix.Sockaddr
		want string
	}{
		{&unix.SockaddrInet4{Port: 7070, Addr: [4]byte{10, 1, 2, 3}}, "10.1.2.3:7070"},
		{&unix.SockaddrInet6{Port: 7070, Addr: [16]byte{15: 1}}, "[::1]:7070"},
		{&unix.SockaddrInet6{Port: 7070, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}, "127.0.0.1:7070"},
	} {
		addr := sockaddrTCP(tc.sa)
		if got := addr.String(); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.sa, got, tc.want)
		}
		if addr.Network() != "tcp" {
			t.Errorf("%+v: network %s", tc.sa, addr.Network())
		}
	}
}
