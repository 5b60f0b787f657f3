package main

import (
	"context"
	"time"

	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// detectScenario: how soon after a silent holder's lease Baton grants the
// next waiter (never before it).
type detectScenario struct{ sharedServer }

func (detectScenario) Name() string { return "detect" }

// detectRun is one lease of the detect scenario and its samples.
type detectRun struct {
	lease   time.Duration
	samples int
}

func (detectScenario) Run(ctx context.Context, r *runner) {
	if r.srv == nil {
		return
	}
	runs := pick(r.o.smoke, []detectRun{{100 * time.Millisecond, 200}, {time.Second, 40}}, []detectRun{{50 * time.Millisecond, 10}})
	par := pick(r.o.smoke, 10, 5)
	for _, run := range runs {
		if ctx.Err() != nil {
			break
		}
		r.logf("detect: baton, lease %v, %d samples", run.lease, run.samples)
		d, err := scenario.Detect(ctx, r.srv.Addr, run.lease, run.samples, par)
		if err != nil {
			r.fail("detect with lease %v: %v", run.lease, err)
			continue
		}
		r.logf("  error p50 %s p99 %s max %s; %d early", report.Dur(d.Error.P50), report.Dur(d.Error.P99), report.Dur(d.Error.Max), d.Early)
		r.res.Detect = append(r.res.Detect, d)
	}
}
