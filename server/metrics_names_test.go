package server_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// scrape is what /metrics would serve of ts's registry.
func scrape(t *testing.T, ts *batontest.Server) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(ts.Srv.Registry(), promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestMetricsCarryNoLockNames: /metrics is open to whoever reaches the ops
// listener, so by default it names no lock: the wait and hold histograms
// cover every lock without a label, and still count.
func TestMetricsCarryNoLockNames(t *testing.T) {
	ts := batontest.StartServer(t)
	h, _ := hold(t, ts, "secret/payroll-run", longLease)
	w := queue(t, ts, "secret/payroll-run", longLease, 1)
	h.Conn.Close()
	expectPush(t, w, frameWait)
	text := scrape(t, ts)
	if strings.Contains(text, "payroll") || strings.Contains(text, `lock="`) {
		t.Fatalf("/metrics names a lock by default:\n%s", grepLines(text, "lock"))
	}
	for _, want := range []string{"baton_wait_seconds_count 2", "baton_hold_seconds_count 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(text, "_seconds_count"))
		}
	}
}

// TestMetricsLockNamesOptIn: with MetricsLockNames, the first names get
// series of their own, and the rest share lock="_other", so squatting the
// bound costs the server nothing more.
func TestMetricsLockNamesOptIn(t *testing.T) {
	ts := batontest.StartServer(t, func(c *server.Config) { c.MetricsLockNames = 2 })
	for _, name := range []string{"a", "b", "c", "d"} {
		c, _ := hold(t, ts, name, longLease)
		c.Conn.Close()
	}
	batontest.Eventually(t, frameWait, func() bool {
		return strings.Contains(scrape(t, ts), `baton_hold_seconds_count{lock="_other"} 2`)
	}, "hold series of c and d not under _other:\n%s", grepLines(scrape(t, ts), "hold_seconds_count"))
	text := scrape(t, ts)
	for _, want := range []string{`baton_wait_seconds_count{lock="a"} 1`, `baton_wait_seconds_count{lock="b"} 1`, `baton_wait_seconds_count{lock="_other"} 2`} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(text, "wait_seconds_count"))
		}
	}
	if strings.Contains(text, `lock="c"`) || strings.Contains(text, `lock="d"`) {
		t.Errorf("names past the bound have series of their own:\n%s", grepLines(text, `lock="`))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
