package ops_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
)

// startBoundedEvents serves the ops API of a real server as baton serve
// does (ConnContext included), with cfg's stream limits.
func startBoundedEvents(t *testing.T, cfg ops.Config) (*batontest.Server, *httptest.Server, *prometheus.Registry) {
	t.Helper()
	ts := batontest.StartServer(t)
	reg := prometheus.NewRegistry()
	cfg.Backend, cfg.Registerer = ts.Srv, reg
	hs := httptest.NewUnstartedServer(ops.NewHandler(cfg))
	hs.Config.ConnContext = ops.ConnContext
	hs.Listener = ops.LimitListener(hs.Listener, ops.ListenerLimits{Conns: 16})
	hs.Start()
	t.Cleanup(hs.Close)
	return ts, hs, reg
}

// openStreams is the value of baton_ops_event_streams.
func openStreams(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, "baton_ops_event_streams")
	if err != nil || n != 1 {
		t.Fatalf("baton_ops_event_streams: %d series, %v", n, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "baton_ops_event_streams" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return -1
}

// stuckSubscriber opens GET /v1/events on a raw connection with a small
// receive buffer and never reads from it.
func stuckSubscriber(t *testing.T, hs *httptest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := io.WriteString(c, "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEventStreamStuckSubscriberCut: a subscriber that stops reading holds
// a bounded buffer of the server's, and is cut once a write has waited
// the write timeout, however large the system would let its buffer grow;
// a reading subscriber keeps its stream.
func TestEventStreamStuckSubscriberCut(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	ts, hs, reg := startBoundedEvents(t, ops.Config{EventWriteTimeout: writeTimeout})
	stuckSubscriber(t, hs)
	batontest.Eventually(t, 5*time.Second, func() bool { return openStreams(t, reg) == 1 }, "stuck stream not open")
	live := openStream(t, hs.URL+"/v1/events", nil)
	batontest.Eventually(t, 5*time.Second, func() bool { return openStreams(t, reg) == 2 }, "live stream not open")
	// About 2,000 events, some 700 KB of stream: far less than an
	// autotuned send buffer takes without blocking.
	sessions := churn(t, ts, 1000)
	for range 2 * sessions {
		live.next(t)
	}
	start := time.Now()
	batontest.Eventually(t, writeTimeout+5*time.Second, func() bool { return openStreams(t, reg) == 1 },
		"the stuck subscriber's stream still open after the events")
	t.Logf("stuck stream cut within %v of the last event", time.Since(start))
	c := holdLock(t, ts, "after")
	live.expect(t, "granted", "after")
	c.Conn.Close()
}

// TestEventStreamCap: past MaxEventStreams open streams, one more is
// answered 503 at once; a closed stream frees its place.
func TestEventStreamCap(t *testing.T) {
	_, hs, reg := startBoundedEvents(t, ops.Config{MaxEventStreams: 2})
	stuckSubscriber(t, hs)
	second := stuckSubscriber(t, hs)
	batontest.Eventually(t, 5*time.Second, func() bool { return openStreams(t, reg) == 2 }, "2 streams not open")
	// A stream answered 200 would never end: the client's timeout ends it.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(hs.URL + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body) // a stream ends at the client's timeout
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: got %d %s (Retry-After %q), want 503 with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	second.Close()
	batontest.Eventually(t, 5*time.Second, func() bool { return openStreams(t, reg) == 1 }, "closed stream still counted")
	openStream(t, hs.URL+"/v1/events", nil)
}
