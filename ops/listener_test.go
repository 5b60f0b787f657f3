package ops_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
)

// limitedServer serves the ops API behind LimitListener with lim, as
// baton serve does (ConnContext, ConnState), and returns its address.
func limitedServer(t *testing.T, lim ops.ListenerLimits, cfg ops.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend == nil {
		cfg.Backend = newFake()
	}
	hs := &http.Server{Handler: ops.NewHandler(cfg), IdleTimeout: time.Minute, ReadHeaderTimeout: time.Minute,
		ConnContext: ops.ConnContext, ConnState: ops.ConnState}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ops.LimitListener(ln, lim)) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return ln.Addr().String()
}

// opsConn is a raw HTTP/1.1 connection to the ops listener.
type opsConn struct {
	t *testing.T
	net.Conn
	r *bufio.Reader
}

func dialOps(t *testing.T, addr string) *opsConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &opsConn{t: t, Conn: c, r: bufio.NewReader(c)}
}

// begin sends a request's first line, and not the end of its headers: the
// connection is busy, not idle.
func (c *opsConn) begin(path string) {
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n")
}

// finish ends the headers begun and reads the answer's status within d:
// 0 if none came (not served, or closed).
func (c *opsConn) finish(extra string, d time.Duration) int {
	io.WriteString(c, extra+"\r\n")
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (c *opsConn) get(path string, d time.Duration) int {
	c.begin(path)
	return c.finish("", d)
}

// TestLimitListener: past the cap, a connection whose request is under
// way keeps its place, and a new one waits (not served) until one closes
// or goes idle; an idle keep-alive connection gives way to a new one.
func TestLimitListener(t *testing.T) {
	addr := limitedServer(t, ops.ListenerLimits{Conns: 2}, ops.Config{})
	first, second := dialOps(t, addr), dialOps(t, addr)
	first.begin("/healthz") // busy: their headers are not complete
	second.begin("/healthz")
	third := dialOps(t, addr)
	if code := third.get("/healthz", 300*time.Millisecond); code != 0 {
		t.Fatalf("a third connection was served (%d) past the cap of 2 busy ones", code)
	}
	first.Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(third.r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("third connection once the first closed: %v, %v", resp, err)
	}
	// third idles (keep-alive) once answered, second is still busy: a
	// fourth takes third's place.
	fourth := dialOps(t, addr)
	if code := fourth.get("/healthz", 5*time.Second); code != 200 {
		t.Fatalf("a new connection beside a busy one and an idle one: %d, want 200", code)
	}
	if code := third.get("/healthz", time.Second); code != 0 {
		t.Fatalf("the idle connection still served (%d), want it closed for the new one", code)
	}
	if code := second.finish("", 5*time.Second); code != 200 {
		t.Fatalf("the busy connection: %d, want 200", code)
	}
}

// TestLimitListenerPerIP: an address holds at most ConnsPerIP connections
// that made no authenticated request; past it, the address's idle one
// gives way to a new one, and without an idle one the new one is closed,
// after waiting RoomWait for one, and counted. A connection that made an authenticated request no
// longer counts.
func TestLimitListenerPerIP(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := limitedServer(t, ops.ListenerLimits{Conns: 16, ConnsPerIP: 2, Registerer: reg}, ops.Config{AdminToken: "tok", Registerer: reg})
	refused := func() float64 {
		return testutil.ToFloat64(mustVec(t, reg).WithLabelValues("connections_per_ip"))
	}
	a, b := dialOps(t, addr), dialOps(t, addr)
	a.begin("/healthz")
	b.begin("/healthz")
	if code := dialOps(t, addr).get("/healthz", 5*time.Second); code != 0 {
		t.Fatalf("a third busy connection of one address: %d, want closed", code)
	}
	if n := refused(); n != 1 {
		t.Fatalf("baton_ops_refusals_total{reason=connections_per_ip} = %v, want 1", n)
	}
	if a.finish("", 5*time.Second) != 200 {
		t.Fatal("a not served")
	}
	// a goes idle just after its answer: then it gives way.
	var d *opsConn
	batontest.Eventually(t, 5*time.Second, func() bool {
		d = dialOps(t, addr)
		return d.get("/healthz", 5*time.Second) == 200
	}, "a new connection beside the address's idle one is not served")
	if code := a.get("/healthz", time.Second); code != 0 {
		t.Fatalf("the idle connection still served (%d), want it closed for the new one", code)
	}
	// An authenticated request takes its connection out of the cap.
	if code := d.get("/v1/locks", 5*time.Second); code != 401 {
		t.Fatalf("GET /v1/locks without the token: %d, want 401", code)
	}
	d.begin("/v1/locks")
	if code := d.finish("Authorization: Bearer tok\r\n", 5*time.Second); code != 200 {
		t.Fatalf("GET /v1/locks with the token: %d, want 200", code)
	}
	d.begin("/healthz") // busy, as b: only b counts
	e := dialOps(t, addr)
	e.begin("/healthz")
	if code := e.finish("", 5*time.Second); code != 200 {
		t.Fatalf("a connection beside a busy untrusted one and a busy trusted one: %d, want 200", code)
	}
}

// TestLimitListenerPerIPWaitsForRoom: a new connection of an address at
// its cap, none of its connections idle, is not closed at once: it waits
// for one to go idle (an operator sharing the address of a hog whose
// connections are busy for moments at a time is served), at most
// WaitingPerIP at once; past them a new one is closed at once.
func TestLimitListenerPerIPWaitsForRoom(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := limitedServer(t, ops.ListenerLimits{Conns: 64, ConnsPerIP: 2, Registerer: reg}, ops.Config{AdminToken: "tok", Registerer: reg})
	refused := func() float64 {
		return testutil.ToFloat64(mustVec(t, reg).WithLabelValues("connections_per_ip"))
	}
	a, b := dialOps(t, addr), dialOps(t, addr)
	a.begin("/healthz")
	b.begin("/healthz")
	c := dialOps(t, addr)
	c.begin("/v1/locks")
	io.WriteString(c, "Authorization: Bearer tok\r\n\r\n")
	// c's request is whole in the kernel; a's answer makes a idle, and
	// c takes its place.
	if a.finish("", 5*time.Second) != 200 {
		t.Fatal("a not served")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(c.r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a connection that waited for its address's room: %v, %v; want 200 once a went idle", resp, err)
	}
	if n := refused(); n != 0 {
		t.Fatalf("baton_ops_refusals_total{reason=connections_per_ip} = %v, want 0", n)
	}

	// b and d busy (c, trusted now, does not count): WaitingPerIP wait,
	// the one after them is closed at once.
	d := dialOps(t, addr)
	d.begin("/healthz")
	var waiting []*opsConn
	for range ops.WaitingPerIP {
		w := dialOps(t, addr)
		w.begin("/healthz")
		waiting = append(waiting, w)
	}
	batontest.Eventually(t, 5*time.Second, func() bool {
		extra := dialOps(t, addr)
		began := time.Now()
		return extra.get("/healthz", 5*time.Second) == 0 && time.Since(began) < ops.RoomWait/2
	}, "a connection past the waiting ones was not closed at once")
	if n := refused(); n < 1 {
		t.Fatalf("baton_ops_refusals_total{reason=connections_per_ip} = %v, want at least 1", n)
	}
	// The waiting ones, nothing going idle, are closed after RoomWait.
	for _, w := range waiting {
		if code := w.finish("", 5*time.Second); code != 0 {
			t.Fatalf("a waiting connection with its address still full: %d, want closed", code)
		}
	}
}

func mustVec(t *testing.T, reg *prometheus.Registry) *prometheus.CounterVec {
	t.Helper()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_ops_refusals_total",
		Help: "Requests to the ops API refused for who sent them, by reason; their log lines are rate-limited, these count them all.",
	}, []string{"reason"})
	err := reg.Register(vec)
	are, ok := err.(prometheus.AlreadyRegisteredError)
	if !ok {
		t.Fatalf("baton_ops_refusals_total is not registered: %v", err)
	}
	return are.ExistingCollector.(*prometheus.CounterVec)
}

// TestLimitListenerSlowHeadersGiveWay: when every place is held by
// connections that have not sent their first request's headers (a
// slowloris; the server's header timeout here is a minute), the oldest of
// them gives way to a new connection once it has been slow for
// SlowRequestAfter: a probe waits about that long, not the header timeout.
func TestLimitListenerSlowHeadersGiveWay(t *testing.T) {
	addr := limitedServer(t, ops.ListenerLimits{Conns: 2}, ops.Config{})
	slow := []*opsConn{dialOps(t, addr), dialOps(t, addr)}
	for _, c := range slow {
		c.begin("/healthz")
	}
	start := time.Now()
	probe := dialOps(t, addr)
	if code := probe.get("/healthz", 10*time.Second); code != 200 {
		t.Fatalf("a probe beside slow connections holding every place: %d after %v, want 200 within about %v",
			code, time.Since(start).Round(time.Millisecond), ops.SlowRequestAfter)
	}
	t.Logf("the probe was answered after %v", time.Since(start).Round(time.Millisecond))
	if code := slow[0].finish("", time.Second); code != 0 {
		t.Errorf("the oldest slow connection still served (%d), want it ended for the probe", code)
	}
}

// TestSlowBodyNotDrained: a request with a body its handler does not read
// (POST /healthz announcing 200,000 bytes, which never come) is answered
// at once with "Connection: close" and its connection closed: the server
// does not wait for the body, holding the place, until its read timeout.
func TestSlowBodyNotDrained(t *testing.T) {
	addr := limitedServer(t, ops.ListenerLimits{Conns: 4}, ops.Config{})
	c := dialOps(t, addr)
	io.WriteString(c, "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200000\r\n\r\nab")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("POST /healthz with a body still to come: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !resp.Close {
		t.Errorf("the answer to a request whose body was not read lacks Connection: close")
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.r.ReadByte()
	if err != io.EOF || time.Since(start) > time.Second {
		t.Errorf("after the answer: %v after %v, want the connection closed at once (EOF) rather than drained", err, time.Since(start).Round(time.Millisecond))
	}
}

// TestRequestRatePerSource: the connections of one address that have
// made no authenticated request begin at most RequestRate requests a
// second together (twice as many at once); the others wait for their
// turn. A request with the admin token does not wait.
func TestRequestRatePerSource(t *testing.T) {
	const rate = 4
	addr := limitedServer(t, ops.ListenerLimits{Conns: 64, RequestRate: rate}, ops.Config{AdminToken: "tok"})
	served := func(extra string) int {
		var n atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			c := dialOps(t, addr)
			wg.Go(func() {
				c.begin("/healthz")
				if c.finish(extra, 400*time.Millisecond) == 200 {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return int(n.Load())
	}
	if n := served(""); n > 2*rate+2 {
		t.Errorf("20 requests at once from one address without a credential: %d served within 400ms, want at most %d (the burst, and the rate)", n, 2*rate+2)
	}
	if n := served("Authorization: Bearer tok\r\n"); n != 20 {
		t.Errorf("20 requests at once with the admin token: %d served within 400ms, want all", n)
	}
}
