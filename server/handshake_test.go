package server_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

// capturedHello is one ClientHello of crypto/tls's client, whole: what a
// flood replays without doing any cryptography.
func capturedHello(t *testing.T) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go tls.Client(c, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}).Handshake()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// closedWithin reports whether the server closes c within d (reading and
// dropping what it sends).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHandshakesPendingCap: past PendingHandshakes handshakes in
// progress, a new connection cuts one of the source with the most, the
// oldest that has not sent its whole ClientHello first; one that has
// keeps its place. Without the cap each stalled handshake held its
// record buffer and goroutine until io-timeout.
func TestHandshakesPendingCap(t *testing.T) {
	t.Parallel()
	const pending = 6
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}, func(c *server.Config) {
		c.PendingHandshakes = pending
		c.IOTimeout = 30 * time.Second
		c.HandshakeRate = 0
	})
	hello := dialRaw(t, s.ts.Addr) // the oldest: it sends its ClientHello whole
	hello.Write(capturedHello(t))
	var silent []net.Conn
	for range pending - 1 {
		c := dialRaw(t, s.ts.Addr)
		c.Write([]byte{0x16, 0x03, 0x01, 0x40, 0x00}) // a record header announcing 16 KiB, and no more
		silent = append(silent, c)
	}
	time.Sleep(200 * time.Millisecond) // all accepted
	dialRaw(t, s.ts.Addr)
	if !closedWithin(silent[0], 500*time.Millisecond) {
		t.Errorf("with %d handshakes in progress, a new connection: the oldest silent one is still open, want it cut", pending)
	}
	if got := counterValue(s.ts, "baton_handshakes_cut_total", "reason", "pending_full"); got != 1 {
		t.Errorf("baton_handshakes_cut_total{reason=pending_full} = %v, want 1", got)
	}
	if closedWithin(hello, 300*time.Millisecond) {
		t.Error("the handshake that had sent its ClientHello was cut, want a silent one first")
	}
}

// TestHandshakeHelloTimeout: a connection that has not sent its whole
// ClientHello within DefaultHelloTimeout is cut, however long io-timeout
// is: a client sends it at once, and a stalled one holds a record buffer.
func TestHandshakeHelloTimeout(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}, func(c *server.Config) { c.IOTimeout = 30 * time.Second })
	c := dialRaw(t, s.ts.Addr)
	c.Write([]byte{0x16, 0x03, 0x01})
	start := time.Now()
	if !closedWithin(c, server.DefaultHelloTimeout+3*time.Second) {
		t.Fatalf("a connection with 3 bytes of a ClientHello still open after %v (io-timeout 30s), want it cut after %v", time.Since(start).Round(time.Millisecond), server.DefaultHelloTimeout)
	}
	if got := counterValue(s.ts, "baton_handshakes_cut_total", "reason", "hello_timeout"); got != 1 {
		t.Errorf("baton_handshakes_cut_total{reason=hello_timeout} = %v, want 1", got)
	}
}

// TestHandshakeRatePerSource: an address of clients not known by a
// verified certificate begins at most HandshakeRate handshakes a second
// (twice as many at once); the others wait for their turn, and are cut
// when it would come after their deadline. A peer replaying a captured
// ClientHello gets few answers, each of which costs the server its key
// exchange and signature.
func TestHandshakeRatePerSource(t *testing.T) {
	t.Parallel()
	const rate = 4
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}, func(c *server.Config) {
		c.HandshakeRate = rate
		c.IOTimeout = 300 * time.Millisecond
	})
	hello := capturedHello(t)
	var answered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 40 {
		c := dialRaw(t, s.ts.Addr)
		wg.Go(func() {
			c.Write(hello)
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			var b [1]byte
			if n, _ := c.Read(b[:]); n == 1 && b[0] == 0x16 { // a ServerHello: the server computed
				answered.Add(1)
			}
			c.Close()
		})
	}
	wg.Wait()
	took := time.Since(start)
	// The burst, and the rate over the time the replay took.
	limit := 2*rate + int(took.Seconds()*rate) + 2
	t.Logf("40 ClientHellos replayed at once in %v: %d answered (rate %d a second, burst %d)", took.Round(time.Millisecond), answered.Load(), rate, 2*rate)
	if int(answered.Load()) > limit {
		t.Errorf("%d of 40 replayed ClientHellos answered in %v, want at most %d (handshake rate per source)", answered.Load(), took.Round(time.Millisecond), limit)
	}
	if answered.Load() == 0 {
		t.Error("no handshake answered: the rate delays, it does not refuse all")
	}
	if got := counterValue(s.ts, "baton_handshakes_cut_total", "reason", "no_turn"); got < 1 {
		t.Errorf("baton_handshakes_cut_total{reason=no_turn} = %v, want some", got)
	}
}
