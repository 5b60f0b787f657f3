package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// handoverScenario: one lock, N waiters, every client re-queuing at once,
// on every system; then 8 waiters with a 20 ms hold.
type handoverScenario struct{ sharedServer }

func (handoverScenario) Name() string { return "handover" }

func (handoverScenario) Run(ctx context.Context, r *runner) {
	waiters := pick(r.o.smoke, []int{8, 1000}, []int{8, 50})
	for _, s := range r.systems {
		runs := make([]scenario.HandoverConfig, 0, len(waiters)+1)
		for _, n := range waiters {
			runs = append(runs, scenario.HandoverConfig{Waiters: n, Duration: r.o.duration})
		}
		runs = append(runs, scenario.HandoverConfig{Waiters: 8, Hold: baseline.Idle, Duration: r.o.duration})
		for i, cfg := range runs {
			if ctx.Err() != nil {
				break
			}
			cfg.Name = fmt.Sprintf("handover-%d", i)
			r.logf("handover: %s, %d waiters, hold %v, %v", s.Name(), cfg.Waiters, cfg.Hold, cfg.Duration)
			var m0 map[string]float64
			if r.srv != nil && strings.HasPrefix(s.Name(), "baton") {
				m0, _ = r.srv.Metrics(ctx)
			}
			h, err := scenario.Handover(ctx, s, cfg)
			if m0 != nil {
				h.ServerMean = serverHandoverMean(ctx, r.srv, m0)
			}
			if err != nil {
				r.failOrSkip(s.Name(), "handover %s with %d waiters: %v", s.Name(), cfg.Waiters, err)
				continue
			}
			r.logf("  p50 %s p99 %s max %s; %.0f handoffs/s; fairness %s; %d errors",
				report.Dur(h.Latency.P50), report.Dur(h.Latency.P99), report.Dur(h.Latency.Max), h.HandoffsPerSec,
				report.Fairness(h.GrantsMin, h.GrantsMax), h.Errors)
			r.res.Handover = append(r.res.Handover, h)
		}
	}
}
