// Black-box tests of the server over real TCP on 127.0.0.1, split by
// concern: protocol_test.go (frames, errors, robustness), queue_test.go
// (FIFO and handover), lease_test.go, iotimeout_test.go, admin_test.go,
// shutdown_test.go (and tokens across restart), metrics_test.go and
// limits_test.go. This file holds TestMain and the shared helpers.
//
// Timing: tests wait for frames, not for time. Where time is the subject,
// lower bounds are exact (never before the lease or the io-timeout) and
// upper bounds are generous enough for a loaded 2-core machine with -race.
package server_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// TestMain fails the package if a goroutine outlives the tests (every
// server goroutine must end with Shutdown) and, when the whole suite ran,
// if an ERROR code the server can send was reached by no test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(codeCoverage{m})
}

// reachableCodes are the codes the server can send.
var reachableCodes = []wire.Code{
	wire.CodeShutdown, wire.CodeOverloaded,
	wire.CodeLeaseExpired, wire.CodeForceReleased, wire.CodeKicked, wire.CodeBusy,
	wire.CodeProtocol, wire.CodeBadRequest, wire.CodeVersion, wire.CodeUnauthorized,
	wire.CodeResumeRefused, wire.CodeSuperseded, wire.CodeMoved, wire.CodeBadCredential,
}

// seenCodes records every ERROR code a test checked (expectError).
var seenCodes sync.Map // wire.Code -> struct{}

type codeCoverage struct{ m *testing.M }

func (c codeCoverage) Run() int {
	code := c.m.Run()
	if code != 0 || flagSet("test.run") || flagSet("test.skip") {
		return code
	}
	var missing []string
	for _, want := range reachableCodes {
		if _, ok := seenCodes.Load(want); !ok {
			missing = append(missing, want.String())
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: no test reached ERROR %s\n", strings.Join(missing, ", "))
		return 1
	}
	return code
}

func flagSet(name string) bool {
	f := flag.Lookup(name)
	return f != nil && f.Value.String() != ""
}

// frameWait bounds the wait for a frame that must come. It is not a
// timing assertion: tests that are about time check their own bounds.
const frameWait = 5 * time.Second

// longLease is a lease that never runs out during a test.
const longLease = 30 * time.Second

func ioTimeout(d time.Duration) func(*server.Config) {
	return func(c *server.Config) { c.IOTimeout = d }
}

func maxSessions(n int) func(*server.Config) {
	return func(c *server.Config) { c.MaxSessions = n }
}

func maxWaiters(n int) func(*server.Config) {
	return func(c *server.Config) { c.MaxWaitersPerLock = n }
}

// hold connects and acquires name, which must be free; it returns the
// connection and its token.
func hold(t *testing.T, ts *batontest.Server, name string, lease time.Duration) (*batontest.Conn, uint64) {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.Acquire(name, lease, false, "test:"+name)
	return c, expectAcquired(t, c)
}

// queue connects and acquires name, which must be held; the session must
// queue at pos.
func queue(t *testing.T, ts *batontest.Server, name string, lease time.Duration, pos uint32) *batontest.Conn {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.Acquire(name, lease, false, "test:"+name)
	expectWaiting(t, c, pos)
	return c
}

// expectAcquired reads an ACQUIRED reply (PUSH=0) and returns its token.
func expectAcquired(t *testing.T, c *batontest.Conn) uint64 {
	t.Helper()
	f := c.ReadFrame(frameWait)
	if f.Type != wire.TypeAcquired || f.Push {
		t.Fatalf("got %v, want an ACQUIRED reply (PUSH=0)", f)
	}
	if f.Token == 0 {
		t.Fatalf("got token 0, want non-zero")
	}
	return f.Token
}

// expectPush reads the promotion push (ACQUIRED PUSH=1) and returns its token.
func expectPush(t *testing.T, c *batontest.Conn, within time.Duration) uint64 {
	t.Helper()
	f := c.ReadFrame(within)
	if f.Type != wire.TypeAcquired || !f.Push {
		t.Fatalf("got %v, want the push ACQUIRED PUSH=1", f)
	}
	return f.Token
}

// expectWaiting reads a WAITING frame at pos.
func expectWaiting(t *testing.T, c *batontest.Conn, pos uint32) {
	t.Helper()
	f := c.ReadFrame(frameWait)
	if f.Type != wire.TypeWaiting || f.Position != pos {
		t.Fatalf("got %v, want WAITING %d", f, pos)
	}
	if f.Payload[0] != 0 {
		t.Fatalf("WAITING flags 0x%02x, want 0", f.Payload[0])
	}
}

// expectError reads ERROR code, then checks that the server closes the
// connection with no further frame.
func expectError(t *testing.T, c *batontest.Conn, code wire.Code) *wire.Error {
	t.Helper()
	return expectErrorWithin(t, c, code, frameWait)
}

func expectErrorWithin(t *testing.T, c *batontest.Conn, code wire.Code, within time.Duration) *wire.Error {
	t.Helper()
	f := c.ReadFrame(within)
	if f.Type != wire.TypeError || f.Err.Code != code {
		t.Fatalf("got %v, want ERROR %v", f, code)
	}
	seenCodes.Store(code, struct{}{})
	c.ExpectClosed(frameWait)
	return f.Err
}

// expectHolds sends a heartbeat and expects the reply ACQUIRED PUSH=0 with token.
func expectHolds(t *testing.T, c *batontest.Conn, token uint64) {
	t.Helper()
	c.Heartbeat()
	if got := expectAcquired(t, c); got != token {
		t.Fatalf("heartbeat reply token %d, want %d", got, token)
	}
}

// expectQueued sends a heartbeat and expects the reply WAITING pos.
func expectQueued(t *testing.T, c *batontest.Conn, pos uint32) {
	t.Helper()
	c.Heartbeat()
	expectWaiting(t, c, pos)
}

// resetConn closes c abortively: the peer gets a RST, not a FIN.
func resetConn(t *testing.T, c *batontest.Conn) {
	t.Helper()
	if err := c.Conn.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatalf("SetLinger(0): %v", err)
	}
	c.Conn.Close()
}

// rawFrame gives the bytes of f as they were on the wire.
func rawFrame(f batontest.Frame) []byte {
	b := []byte{byte(f.Type), byte(len(f.Payload) >> 8), byte(len(f.Payload))}
	return append(b, f.Payload...)
}

// unhex turns "01 00 0b" into bytes; the strings are the tests' own.
func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(fmt.Sprintf("bad hex %q: %v", s, err))
	}
	return b
}

// acquireFrame builds an ACQUIRE frame without checking its fields, so
// tests can send what a correct client never would.
func acquireFrame(version, flags byte, leaseMs uint32, name, owner string) []byte {
	p := []byte{version, flags}
	p = binary.BigEndian.AppendUint32(p, leaseMs)
	p = append(p, byte(len(name)))
	p = append(p, name...)
	p = append(p, owner...)
	return wire.AppendFrame(nil, wire.TypeAcquire, p)
}

// heartbeats is n HEARTBEAT frames back to back.
func heartbeats(n int) []byte {
	return bytes.Repeat(wire.AppendHeartbeat(nil), n)
}

// series gathers the metric family name from reg and returns its series
// by label set ("" for a series without labels, else "k=v,k=v"); a
// histogram's value is its sample count.
func series(t testing.TB, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		out := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Histogram != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("metric %s: unexpected type %v", name, mf.GetType())
			}
			out[strings.Join(labels, ",")] = v
		}
		return out
	}
	t.Fatalf("no metric family %s", name)
	return nil
}

// metric is one series of series(); labels is "" or "k=v,...".
func metric(t testing.TB, reg prometheus.Gatherer, name, labels string) float64 {
	t.Helper()
	s := series(t, reg, name)
	v, ok := s[labels]
	if !ok {
		t.Fatalf("metric %s has no series {%s}; it has %v", name, labels, keys(s))
	}
	return v
}

// nonZero drops the zero series, for comparing with a want map.
func nonZero(s map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func keys(m map[string]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// eventuallyMetric waits until metric name{labels} is want: the server
// updates some series after the frame the test saw (a close it noticed, a
// write that just completed).
func eventuallyMetric(t *testing.T, reg prometheus.Gatherer, name, labels string, want float64) {
	t.Helper()
	var got float64
	deadline := time.Now().Add(frameWait)
	for {
		got = metric(t, reg, name, labels)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric %s{%s} = %v, want %v; non-zero series: %v", name, labels, got, want, nonZero(series(t, reg, name)))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// flood makes c an owner that never reads: a goroutine pipelines
// heartbeats until its writes stall (the server's replies have filled c's
// small receive buffer, the server's write to c is blocked and it has
// stopped reading). stuck is closed then. The goroutine then completes the
// frame it was cut in and sends nothing more, so that the server never
// waits for the rest of a frame (which would end the session by read
// timeout, not write timeout). It ends when the connection closes;
// t.Cleanup closes it and waits.
func flood(t *testing.T, c *batontest.Conn) (stuck <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{})
	done := make(chan struct{})
	batch := heartbeats(1024)
	go func() {
		defer close(done)
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
			c.Conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := c.Conn.Write(batch)
			if err == nil {
				continue
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return // the server closed the connection
			}
			close(ch)
			if rest := (3 - n%3) % 3; rest > 0 {
				c.Conn.SetWriteDeadline(time.Time{})
				c.Conn.Write(batch[:rest]) // returns when sent or closed
			}
			return
		}
	}()
	t.Cleanup(func() {
		c.Conn.Close()
		<-done
	})
	return ch
}

// dialSmallBuffer connects with a small receive buffer, set before the
// connect so that the window is small from the first segment: a client
// that does not read then blocks the server's writes after a few
// kilobytes, long before the server has read all it was sent.
func dialSmallBuffer(t *testing.T, ts *batontest.Server) *batontest.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = setRcvbuf(fd, 4096) }); cerr != nil {
			return cerr
		}
		return err
	}}
	nc, err := d.Dial("tcp", ts.Addr)
	if err != nil {
		t.Fatalf("dial %s: %v", ts.Addr, err)
	}
	c := batontest.NewConn(t, nc)
	if err := nc.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatalf("SetReadBuffer: %v", err)
	}
	return c
}

// waitChan waits for ch, failing after within.
func waitChan(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("after %v: %s", within, what)
	}
}

// waitHeartbeatsStall waits until the server has counted no heartbeat for
// 200ms: after flood stalled, the server may still be working off the
// heartbeats it has buffered; once it counts none, its reader of the
// flooding client is blocked in a write. Only the flooding client may be
// heartbeating.
func waitHeartbeatsStall(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	const quiet = 200 * time.Millisecond
	last, since := -1.0, time.Now()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n := metric(t, reg, "baton_heartbeats_total", "")
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return
		}
	}
	t.Fatalf("heartbeats never stopped: the server never blocked on the flooding client")
}
