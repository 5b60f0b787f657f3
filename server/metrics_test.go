package server_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestMetrics runs a scripted scenario and checks every series it moves,
// exactly; series it does not mention must be 0.
func TestMetrics(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, maxWaiters(3))
	reg := ts.Srv.Registry()
	srv := ts.Srv
	var hb int // heartbeats sent and answered

	// m: a holder heartbeats, closes; a force-release; a kick; a BUSY.
	h1, tok := hold(t, ts, "m", longLease) // immediate 1
	w1 := queue(t, ts, "m", longLease, 1)
	w2 := queue(t, ts, "m", longLease, 2)
	for range 3 {
		expectHolds(t, h1, tok)
		hb++
	}
	expectQueued(t, w1, 1)
	hb++
	h1.Conn.Close() // handover closed; promotion 1
	expectPush(t, w1, frameWait)
	if _, err := srv.ForceRelease("m"); err != nil { // handover force_released; promotion 2
		t.Fatal(err)
	}
	expectError(t, w1, wire.CodeForceReleased)
	tokM := expectPush(t, w2, frameWait)
	k := queue(t, ts, "m", longLease, 1)
	lv, _ := srv.Lock("m")
	if _, err := srv.Kick(lv.Waiters[0].ID); err != nil {
		t.Fatal(err)
	}
	expectError(t, k, wire.CodeKicked)
	b := batontest.Dial(t, ts.Addr)
	b.Acquire("m", longLease, true, "")
	expectError(t, b, wire.CodeBusy)

	// n: a holder's lease runs out (handover lease_expired; promotion 3).
	hn := batontest.Dial(t, ts.Addr)
	hn.Acquire("n", 200*time.Millisecond, false, "") // immediate 2
	expectAcquired(t, hn)
	wn := queue(t, ts, "n", longLease, 1)
	expectErrorWithin(t, hn, wire.CodeLeaseExpired, frameWait)
	expectPush(t, wn, frameWait)

	// m: a waiter's lease runs out.
	sw := batontest.Dial(t, ts.Addr)
	sw.Acquire("m", 100*time.Millisecond, false, "")
	expectWaiting(t, sw, 1)
	expectErrorWithin(t, sw, wire.CodeLeaseExpired, frameWait)

	// m: the waiter limit (3) refuses a fourth.
	for i := range 3 {
		queue(t, ts, "m", longLease, uint32(i+1))
	}
	over := batontest.Dial(t, ts.Addr)
	over.Acquire("m", longLease, false, "")
	expectError(t, over, wire.CodeOverloaded)

	// Client errors.
	for _, tt := range []struct {
		send []byte
		code wire.Code
	}{
		{heartbeats(1), wire.CodeProtocol},
		{unhex("02 04 01"), wire.CodeProtocol},
		{acquireFrame(1, 0, 0, "x", ""), wire.CodeBadRequest},
		{acquireFrame(4, 0, 1000, "x", ""), wire.CodeVersion},
	} {
		c := batontest.Dial(t, ts.Addr)
		c.Write(tt.send)
		expectError(t, c, tt.code)
		c.Conn.Close()
	}

	// r: a holder's connection is reset (handover reset; promotion 4).
	hr, _ := hold(t, ts, "r", longLease) // immediate 3
	wr := queue(t, ts, "r", longLease, 1)
	resetConn(t, hr)
	expectPush(t, wr, frameWait)
	for _, c := range []*batontest.Conn{w1, k, b, hn, sw, over} {
		c.Conn.Close()
	}
	expectHolds(t, w2, tokM)
	hb++

	// Now: holders w2 (m), wn (n), wr (r); waiters: the three on m.
	want := map[string]map[string]float64{
		"baton_sessions":             {"state=holding": 3, "state=waiting": 3},
		"baton_locks":                {"": 3},
		"baton_connections":          {"": 6},
		"baton_grants_total":         {"kind=immediate": 3, "kind=promotion": 4},
		"baton_handovers_total":      {"cause=closed": 1, "cause=force_released": 1, "cause=lease_expired": 1, "cause=reset": 1},
		"baton_lease_expiries_total": {"state=holding": 1, "state=waiting": 1},
		"baton_heartbeats_total":     {"": float64(hb)},
		"baton_protocol_errors_total": {
			"code=PROTOCOL": 2, "code=BAD_REQUEST": 1, "code=VERSION": 1,
		},
		"baton_limit_refusals_total":     {"limit=waiters": 1},
		"baton_handover_latency_seconds": {"": 4},
		"baton_sessions_ended_total": {
			"reason=closed": 1, "reason=force_released": 1, "reason=kicked": 1, "reason=busy": 1,
			"reason=lease_expired": 2, "reason=overloaded": 1, "reason=protocol_error": 2,
			"reason=bad_request": 1, "reason=version": 1, "reason=reset": 1,
		},
	}
	// Some series move just after the frame the test saw (a close the
	// server notices, a push's write completing): wait for them to settle.
	var diff string
	for deadline := time.Now().Add(frameWait); ; time.Sleep(5 * time.Millisecond) {
		if diff = metricsDiff(t, reg, want); diff == "" || time.Now().After(deadline) {
			break
		}
	}
	if diff != "" {
		t.Fatalf("metrics after the scenario:\n%s", diff)
	}

	// Every label value of a family exists from the start.
	for name, n := range map[string]int{
		"baton_sessions": 2, "baton_grants_total": 2, "baton_lease_expiries_total": 2,
		"baton_protocol_errors_total": 6, "baton_limit_refusals_total": 6,
		"baton_resumes_total": 6, "baton_resumes_refused_total": 14,
	} {
		got, err := testutil.GatherAndCount(reg, name)
		if err != nil || got != n {
			t.Errorf("GatherAndCount(%s) = %d, %v; want %d series", name, got, err, n)
		}
	}
}

// metricsDiff describes how the families in want differ from reg's; ""
// when they match. Series not in want must be 0.
func metricsDiff(t *testing.T, reg prometheus.Gatherer, want map[string]map[string]float64) string {
	t.Helper()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got := nonZero(series(t, reg, name))
		if !maps.Equal(got, nonZero(want[name])) {
			fmt.Fprintf(&b, "%s: got %v, want %v\n", name, got, want[name])
		}
	}
	return b.String()
}
