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
