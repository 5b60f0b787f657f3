package ops_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
)

// BenchmarkHandoverWithSubscribers measures what event subscribers cost the
// lock table: a handover (holder's close to the next holder's push, as in
// server.BenchmarkHandover) with no /v1/events client, and with 100 idle
// clients (following another lock, ?lock=, so they get no event but wake
// on each), 100 clients that read every event, and 10 that connect and
// never read. Run all in one run and compare their ns/handover to none's:
//
//	go test -run '^$' -bench HandoverWithSubscribers -benchtime 3000x ./ops
func BenchmarkHandoverWithSubscribers(b *testing.B) {
	for _, bc := range []struct{ idle, reading, stalled int }{{0, 0, 0}, {100, 0, 10}, {0, 0, 10}, {0, 100, 0}, {0, 100, 10}} {
		b.Run(fmt.Sprintf("idle=%d,reading=%d,stalled=%d", bc.idle, bc.reading, bc.stalled), func(b *testing.B) {
			benchHandoverSubscribers(b, bc.idle, bc.reading, bc.stalled)
		})
	}
}

func benchHandoverSubscribers(b *testing.B, idle, reading, stalled int) {
	srv := batontest.StartServer(b)
	hs := httptest.NewServer(ops.NewHandler(ops.Config{Backend: srv.Srv,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer hs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()

	connected := make(chan struct{}, idle+reading)
	for i := range idle + reading {
		path := "/v1/events"
		if i < idle {
			path += "?lock=elsewhere"
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			connected <- struct{}{}
			io.Copy(io.Discard, resp.Body)
		}()
	}
	for range idle + reading {
		<-connected
	}
	// Stalled clients: a small receive buffer, a request, and no read ever.
	addr := hs.Listener.Addr().String()
	for range stalled {
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/events HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil { // the status line, then never again
			b.Fatal(err)
		}
	}

	holder := batontest.Dial(b, srv.Addr)
	holder.Acquire("bench", time.Minute, false, "")
	holder.ReadFrame(time.Second)
	var total time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		waiter := batontest.Dial(b, srv.Addr)
		waiter.Acquire("bench", time.Minute, false, "")
		if f := waiter.ReadFrame(time.Second); f.Type != wire.TypeWaiting {
			b.Fatalf("got %v, want WAITING", f)
		}
		start := time.Now()
		holder.Conn.Close()
		if f := waiter.ReadFrame(time.Second); !f.Push {
			b.Fatalf("got %v, want the ACQUIRED push", f)
		}
		total += time.Since(start)
		holder = waiter
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/handover")
}
