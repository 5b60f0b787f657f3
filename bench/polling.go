package main

import (
	"context"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// pollingScenario: Baton's handover beside a large queue, without and
// with loops polling GET /v1/locks.
type pollingScenario struct{ sharedServer }

func (pollingScenario) Name() string { return "polling" }

func (pollingScenario) Run(ctx context.Context, r *runner) {
	if r.srv == nil || !r.want("baton") || ctx.Err() != nil {
		return
	}
	loadgen.RaiseNoFile() // the queue's sessions are this process's connections
	cfg := scenario.PollingConfig{OpsAddr: r.srv.OpsAddr, Addr: r.srv.Addr, Queue: pick(r.o.smoke, 10000, 200), Pollers: 20,
		Waiters: 8, Window: r.o.duration, Rounds: 2}
	r.logf("polling: baton, handover of 8 waiters beside %d queued sessions, without and with %d loops polling GET /v1/locks, %d rounds of %v each", cfg.Queue, cfg.Pollers, cfg.Rounds, cfg.Window)
	p, err := scenario.Polling(ctx, batonsys.NewSystem(r.srv, r.bin, 10*time.Second), cfg)
	if err != nil {
		r.fail("polling: %v", err)
		return
	}
	r.logf("  handover p50 %s p99 %s without polling, p50 %s p99 %s with %d pollers (%d listings, p50 %s each); %d errors",
		report.Dur(p.Quiet.P50), report.Dur(p.Quiet.P99), report.Dur(p.Polled.P50), report.Dur(p.Polled.P99),
		p.Pollers, p.Listings, report.Dur(p.ListingP50), p.Errors)
	r.res.Polling = &p
}
