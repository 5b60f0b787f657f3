package server

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLockLabelBound: with MetricsLockNames, the first that many names
// get series of their own, later ones share otherLocks, and a name seen
// before keeps its own.
func TestLockLabelBound(t *testing.T) {
	const bound = 1000
	m := newMetrics(prometheus.NewRegistry(), bound)
	for i := range bound {
		if got, want := m.series(fmt.Sprint("lock-", i)).label, fmt.Sprint("lock-", i); got != want {
			t.Fatalf("lockLabel #%d: got %q, want %q", i, got, want)
		}
	}
	if got := m.series("one-too-many").label; got != otherLocks {
		t.Errorf("lockLabel past the bound: got %q, want %q", got, otherLocks)
	}
	if got := m.series("lock-7").label; got != "lock-7" {
		t.Errorf("lockLabel of a name seen before: got %q, want lock-7", got)
	}
}

// TestHandoverCauses: baton_handovers_total has a series for each reason
// that can make room for a waiter, and none for a reason that never can
// (a refusal, which never held; a shutdown or a lost term, which promote
// nobody), which would only ever read 0.
func TestHandoverCauses(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg, 0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "baton_handovers_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				got[l.GetValue()] = true
			}
		}
	}
	for _, r := range allReasons {
		want := r.promotes()
		if got[r.String()] != want {
			t.Errorf("baton_handovers_total{cause=%q}: got a series %v, want %v", r, got[r.String()], want)
		}
	}
	for _, cause := range []string{"closed", "force_released", "lease_expired", "kicked"} {
		if !got[cause] {
			t.Errorf("baton_handovers_total{cause=%q} missing", cause)
		}
	}
	for _, cause := range []string{"limit_mismatch", "busy", "shutdown", "not_leader"} {
		if got[cause] {
			t.Errorf("baton_handovers_total{cause=%q}: a series that can never count", cause)
		}
	}
}
