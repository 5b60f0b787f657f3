package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes one byte and reads it back, returning the time taken.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, b byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte{b}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	if got != b {
		t.Fatalf("echo %d, want %d", got, b)
	}
	return time.Since(start)
}

func TestDelay(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	if d := roundTrip(t, c, r, 1); d > 50*time.Millisecond {
		t.Errorf("round trip without delay took %v", d)
	}
	p.SetDelay(Both, 40*time.Millisecond)
	if d := roundTrip(t, c, r, 2); d < 80*time.Millisecond || d > time.Second {
		t.Errorf("round trip with 40ms each way took %v, want about 80ms", d)
	}
	p.SetDelay(Up, 0)
	if d := roundTrip(t, c, r, 3); d < 40*time.Millisecond || d > time.Second {
		t.Errorf("round trip with 40ms down took %v, want about 40ms", d)
	}
}

func TestStallHoldsBytesAndClose(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	roundTrip(t, c, r, 1)
	p.Stall(Up)
	c.Write([]byte("abc"))
	c.(*net.TCPConn).CloseWrite() // held too
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := r.ReadByte(); !isTimeout(err) {
		t.Fatalf("read during stall: %v, want a timeout", err)
	}
	p.Resume(Up)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "abc" {
		t.Fatalf("after resume read %q, %v; want \"abc\" then EOF", got, err)
	}
}

func TestDrop(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	var mu sync.Mutex
	var dropped, sent int
	p.SetTap(func(ch Chunk) {
		mu.Lock()
		defer mu.Unlock()
		if ch.Dropped {
			dropped += len(ch.Data)
		} else {
			sent += len(ch.Data)
		}
	})
	p.Drop(Down, true)
	c.Write([]byte("lost"))
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := r.ReadByte(); !isTimeout(err) {
		t.Fatalf("read during drop: %v, want a timeout", err)
	}
	p.Drop(Down, false)
	roundTrip(t, c, r, 7)
	// The tap sees a chunk after its write: the echo can reach the client
	// before the tap has counted it.
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return dropped, sent
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, fwd := counts(); fwd >= 4+1+1 {
			break
		}
	}
	lost, fwd := counts()
	if lost != 4 {
		t.Errorf("dropped %d bytes, want 4", lost)
	}
	if fwd != 4+1+1 { // "lost" up, 7 up and down
		t.Errorf("forwarded %d bytes, want 6", fwd)
	}
}

func TestReset(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	roundTrip(t, c, r, 1)
	p.Reset()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := r.ReadByte()
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: %v, want ECONNRESET", err)
	}
	// New links still work.
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, bufio.NewReader(c2), 2)
	if got := p.Accepted(); got != 2 {
		t.Errorf("Accepted() = %d, want 2", got)
	}
}

func TestTapTimestamps(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	chunks := make(chan Chunk, 4)
	p.SetTap(func(ch Chunk) { chunks <- ch })
	p.SetDelay(Down, 30*time.Millisecond)
	roundTrip(t, c, r, 9)
	up, down := <-chunks, <-chunks
	if up.Dir != Up || down.Dir != Down || up.Link != 1 {
		t.Fatalf("chunks %+v, %+v", up, down)
	}
	if d := down.Sent.Sub(down.Read); d < 30*time.Millisecond {
		t.Errorf("down chunk held %v, want at least 30ms", d)
	}
	// (The echo can be read before the up write returns: no order there.)
	if up.Sent.Before(up.Read) || down.Read.Before(up.Read) || down.Sent.Before(down.Read) {
		t.Errorf("timestamps out of order: up %v..%v, down %v..%v", up.Read, up.Sent, down.Read, down.Sent)
	}
}

func TestDeadTargetResets(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	target := ln.Addr().String()
	ln.Close()
	p := startProxy(t, target)
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		return // reset while connecting: as good
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read through a proxy to a dead target: %v, want EOF or reset", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
