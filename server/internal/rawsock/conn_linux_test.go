package rawsock

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// connPair returns a Conn accepted with accept4, as an Acceptor makes
// them, and the client's end.
func connPair(t *testing.T) (*Conn, net.Conn) {
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
	sc := newConn(fd, sa)
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

// TestConnCloseWaitsForUse: a Close while the descriptor is in use
// (the handover's push written from another goroutine) is carried out when
// that use ends, so the descriptor's number cannot be reused under it;
// after the Close, nothing uses it.
func TestConnCloseWaitsForUse(t *testing.T) {
	sc, client := connPair(t)
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
	if _, err := sc.Read(b[:]); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	if err := sc.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// TestConnPollable: the first blocking call hands the descriptor to
// the runtime poller, and errors come as net's connections give them
// (the server's readFailure and writeFailed classify them).
func TestConnPollable(t *testing.T) {
	sc, client := connPair(t)
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
	if _, err := sc.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
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
	if _, err := sc.Read(b[:]); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after the client's reset: %v, want ECONNRESET", err)
	}
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
