package report

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/stats"
)

// TestMarkdownTellsNoHistory: docs/benchmarks.md pastes this text, and a
// page describes what was measured, not when or on which commit: the
// start, the machine's load and the commit stay in results.json.
func TestMarkdownTellsNoHistory(t *testing.T) {
	r := &Results{
		Started: time.Date(2026, 12, 3, 9, 19, 58, 0, time.UTC), Elapsed: 280 * time.Second, Command: "go run .",
		Machine:  Machine{CPU: "AMD EPYC", Cores: 2, Memory: "24683568 kB", Kernel: "Linux 6.18", Go: "go1.26.8", NoFile: "20000", LoadStart: "1.47 2.45 2.14", LoadEnd: "3.96 3.10 2.47"},
		Versions: map[string]string{"baton": "baton (devel) go1.26.8 linux/amd64 (commit 9432be2)", "redis": "7.0.15"},
		Cluster: &scenario.ClusterResult{Nodes: 3, Failover: &scenario.FailoverResult{Nodes: 3, Names: 3, Waiters: 2, Lease: time.Second,
			Kill: scenario.FaultResult{Kind: "kill -9", FirstGrant: stats.Summary{N: 100, P50: 1900 * time.Millisecond, P99: 2100 * time.Millisecond}}}},
	}
	md := Markdown(r)
	for _, want := range []string{
		"Results of `go run .` — full sizes, 4m40s of measuring.",
		"Machine: AMD EPYC, 2 cores, 24683568 kB memory, Linux 6.18, go1.26.8, open-file hard limit 20000.",
		"| baton | baton (devel) go1.26.8 linux/amd64 |",
		"| redis | 7.0.15 |",
		"Goal: with 1 s leases",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	for _, history := range []string{"2026", "09:19", "1.47 2.45", "oad average", "(commit", "9432be2", "issue"} {
		if strings.Contains(md, history) {
			t.Errorf("markdown names %q, the history of the run:\n%s", history, md)
		}
	}
}
