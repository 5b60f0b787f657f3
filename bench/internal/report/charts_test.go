package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestChartsFromResults redraws the charts from a results.json: the
// committed one when BENCH_RESULTS names it, else a minimal one.
func TestChartsFromResults(t *testing.T) {
	r := &Results{}
	if f := os.Getenv("BENCH_RESULTS"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, r); err != nil {
			t.Fatal(err)
		}
	}
	dir := os.Getenv("BENCH_CHARTS_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := Charts(dir, r); err != nil {
		t.Fatalf("Charts: %v", err)
	}
	for _, f := range []string{HandoverChart, ThroughputChart, MemoryChart, FloorChart} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
