package ops_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/ops"
)

// TestRefusedRequestsLogLimited: a flood of requests with a wrong token
// writes a bounded number of WARN lines, and baton_ops_refusals_total
// counts every one; a line after the flood says how many were left out.
func TestRefusedRequestsLogLimited(t *testing.T) {
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	h := ops.NewHandler(ops.Config{Backend: newFake(), AdminToken: "s3cret", Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	lines := func() int {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		return strings.Count(logs.b.String(), "ops: unauthorized request")
	}
	const refused = 500
	start := time.Now()
	for range refused {
		req := httptest.NewRequest("GET", "/v1/locks", nil)
		req.Header.Set("Authorization", "Bearer wrong")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("got %d, want 401", rec.Code)
		}
	}
	secs := int(time.Since(start)/time.Second) + 1
	if n, most := lines(), 20+secs; n > most {
		t.Fatalf("%d refused requests wrote %d WARN lines in %ds, want at most %d", refused, n, secs, most)
	}
	if got := counterOf(t, reg, "baton_ops_refusals_total", "token"); got != refused {
		t.Fatalf(`baton_ops_refusals_total{reason="token"} %v, want %d`, got, refused)
	}
	time.Sleep(1100 * time.Millisecond)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/locks", nil))
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if !strings.Contains(logs.b.String(), "suppressed=") {
		t.Fatalf("no line says how many refusals were not logged")
	}
}

// counterOf is the value of the series of name with reason in reg.
func counterOf(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{reason=%q}", name, reason)
	return 0
}
