package ops_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/batonlock/baton/ops"
)

// TestLimitListener: past the cap, a connection is not accepted (its
// request waits in the backlog) until an open one closes; then it is
// served.
func TestLimitListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: ops.NewHandler(ops.Config{Backend: newFake()}), IdleTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ops.LimitListener(ln, 2)) }()
	t.Cleanup(func() { hs.Close(); <-done })

	// request sends GET /healthz on a new connection and reads the
	// answer's first bytes, within d.
	request := func(d time.Duration) (net.Conn, error) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(d))
		var b [12]byte
		_, err = io.ReadFull(c, b[:])
		return c, err
	}
	first, err := request(5 * time.Second)
	if err != nil {
		t.Fatalf("first connection: %v", err)
	}
	if _, err := request(5 * time.Second); err != nil {
		t.Fatalf("second connection: %v", err)
	}
	// Both stay open (keep-alive): a third is not served.
	third, err := request(300 * time.Millisecond)
	if err == nil {
		t.Fatal("a third connection was served past the cap of 2")
	}
	first.Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [12]byte
	if _, err := io.ReadFull(third, b[:]); err != nil || string(b[:9]) != "HTTP/1.1 " {
		t.Fatalf("third connection once the first closed: %q, %v", b, err)
	}
}
