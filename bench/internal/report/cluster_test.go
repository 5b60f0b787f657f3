package report

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/stats"
)

func clusterRun(sys string, round int, hold, p50, p99 time.Duration, rate float64) scenario.ClusterRun {
	return scenario.ClusterRun{Round: round, Cost: scenario.Cost{ServerCPU: time.Second}, HandoverResult: scenario.HandoverResult{
		System: sys, Waiters: 8, Hold: hold, HandoffsPerSec: rate,
		Latency: stats.Summary{N: 1000, P50: p50, P99: p99}}}
}

// TestClusterMarkdown: the medians over rounds and the verdicts against
// the 10 % target, on both sides of it.
func TestClusterMarkdown(t *testing.T) {
	us := time.Microsecond
	r := &Results{Cluster: &scenario.ClusterResult{Nodes: 3, Rounds: 3, Runs: []scenario.ClusterRun{
		clusterRun("baton", 0, 0, 100*us, 300*us, 5000),
		clusterRun("baton-cluster", 0, 0, 150*us, 320*us, 4000),
		clusterRun("baton", 1, 0, 90*us, 900*us, 5200), // an outlier p99: the median drops it
		clusterRun("baton-cluster", 1, 0, 105*us, 310*us, 4700),
		clusterRun("baton", 2, 0, 110*us, 310*us, 4800),
		clusterRun("baton-cluster", 2, 0, 108*us, 330*us, 4600),
		clusterRun("baton", 0, baseline.Idle, 500*us, time.Millisecond, 45),
		clusterRun("baton-cluster", 0, baseline.Idle, 600*us, time.Millisecond, 45),
	}}}
	f, ok := r.Cluster.Median("baton-cluster", 8, 0)
	if !ok || f.Rounds != 3 || f.P50 != 108*us || f.P99 != 320*us || f.HandoffsPerSec != 4600 || f.CPUPerHandoff != time.Millisecond {
		t.Fatalf("median: %+v, %v", f, ok)
	}
	if _, ok := r.Cluster.Median("baton", 1000, 0); ok {
		t.Error("median of runs that do not exist")
	}
	md := ClusterMarkdown(r)
	for _, want := range []string{
		"| handover p50, back to back | 100.0 µs | 108.0 µs | 1.08 | ≤ 1.10 | met |",
		"| handover p99, back to back | 310.0 µs | 320.0 µs | 1.03 | ≤ 1.10 | met |",
		"| hot-lock rate (handoffs/s), back to back | 5000 | 4600 | 0.92 | ≥ 0.90 | met |",
		"| handover p50, after a 20.00 ms hold | 500.0 µs | 600.0 µs | 1.20 | ≤ 1.10 | not met: 20 % slower |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	r.Cluster.Failover = &scenario.FailoverResult{Nodes: 3, Names: 3, Waiters: 2, Lease: time.Second,
		Kill: scenario.FaultResult{Kind: "kill -9", FirstGrant: stats.Summary{N: 100, P50: 1900 * time.Millisecond, P99: 2600 * time.Millisecond}},
		Term: scenario.FaultResult{Kind: "SIGTERM", FirstGrant: stats.Summary{N: 100, P50: 30 * time.Millisecond, P99: 60 * time.Millisecond}}}
	md = ClusterMarkdown(r)
	if want := "p99 over 100 faults: 2.60 s, **not met: 100.00 ms over**"; !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
	if ClusterMarkdown(&Results{}) != "" {
		t.Error("markdown for a run without the cluster scenarios")
	}
}
