package report

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/stats"
)

// TestSemaphoreMarkdown: each system's medians over its rounds, and
// Baton ÷ the other system round by round, paired by round.
func TestSemaphoreMarkdown(t *testing.T) {
	run := func(sys string, round int, hold, p50 time.Duration, rate float64, cpu time.Duration) scenario.SemaphoreResult {
		return scenario.SemaphoreResult{System: sys, Round: round, Limit: 4, Contenders: 16, Hold: hold,
			Handover: stats.Summary{N: 100, P50: p50, P99: 2 * p50, Mean: p50 + p50/2}, SlotChangesPerSec: rate, ServerCPUPerChange: cpu,
			GrantsMin: 10, GrantsMax: 12, MostHolders: 4}
	}
	us := time.Microsecond
	withMean := run("baton-wire", 1, 0, 100*us, 8000, 50*us)
	withMean.ServerMean = 30 * us
	unfair := run("dflockd", 3, time.Millisecond, 500*us, 2500, 0)
	unfair.GrantsMin, unfair.GrantsMax = 5, 15
	r := &Results{Semaphore: []scenario.SemaphoreResult{
		withMean,
		run("dflockd", 1, 0, 200*us, 4000, 100*us),
		run("dflockd", 2, 0, 300*us, 2000, 100*us), // Baton's round 2 failed: no ratio for it
		run("baton-wire", 1, time.Millisecond, 300*us, 3000, 0),
		run("baton-wire", 3, time.Millisecond, 500*us, 2000, 0),
		run("dflockd", 1, time.Millisecond, 600*us, 2000, 0),
		unfair, // the least fair round comes last: its figure is the one shown
	}}
	md := SemaphoreMarkdown(r)
	for _, want := range []string{
		"### Semaphore: 4 slots, 16 contenders",
		"| baton-wire | none | 1 | 100.0 µs | 200.0 µs | 150.0 µs | 30.0 µs | 8000 | 50.0 µs | 4 | 1.20 (12/10) | 0 |",
		"| dflockd | none | 2 | 250.0 µs | 500.0 µs | 375.0 µs | – | 3000 | 100.0 µs | 4 | 1.20 (12/10) | 0 |",
		"| baton-wire | 1.00 ms | 2 | 400.0 µs | 800.0 µs | 600.0 µs | – | 2500 | – |",
		"| dflockd | 1.00 ms | 2 | 550.0 µs | 1.10 ms | 825.0 µs | – | 2250 | – | 4 | 3.00 (15/5) | 0 |",
		"| none | dflockd | 0.50× | 0.50 | 2.00× | 2.00 | 0.50× | 0.50 |",
		"| 1.00 ms | dflockd | 0.75× | 0.50 · 1.00 | 1.15× | 1.50 · 0.80 | – | – · – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("semaphore markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Index(md, "| baton-wire | none") > strings.Index(md, "| baton-wire | 1.00 ms") {
		t.Errorf("rows not in order of hold:\n%s", md)
	}
	if SemaphoreMarkdown(&Results{}) != "" {
		t.Errorf("a run without the scenario renders a section")
	}
}
