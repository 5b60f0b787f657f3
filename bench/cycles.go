package main

import (
	"context"

	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// cyclesScenario: uncontended claims, each client on a lock of its own,
// on every system.
type cyclesScenario struct{ sharedServer }

func (cyclesScenario) Name() string { return "cycles" }

func (cyclesScenario) Run(ctx context.Context, r *runner) {
	for _, s := range r.systems {
		for _, n := range pick(r.o.smoke, []int{16, 256}, []int{4, 16}) {
			if ctx.Err() != nil {
				break
			}
			r.logf("cycles: %s, %d clients, %v", s.Name(), n, r.o.duration)
			c, err := scenario.Cycles(ctx, s, n, r.o.duration)
			if err != nil {
				r.failOrSkip(s.Name(), "cycles %s with %d clients: %v", s.Name(), n, err)
				continue
			}
			r.logf("  p50 %s p99 %s max %s; %.0f cycles/s; %d errors", report.Dur(c.Latency.P50),
				report.Dur(c.Latency.P99), report.Dur(c.Latency.Max), c.CyclesPerSec, c.Errors)
			r.res.Cycles = append(r.res.Cycles, c)
		}
	}
}
