package main

import (
	"context"
	"fmt"
	"time"

	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// scaleScenario: Baton's memory per session and CPU per heartbeat at each
// of -scale-sessions, each step on a fresh server.
type scaleScenario struct{ noServer }

func (scaleScenario) Name() string { return "scale" }

func (scaleScenario) Run(ctx context.Context, r *runner) {
	if !r.want("baton") {
		return
	}
	nofile, _ := loadgen.RaiseNoFile()
	for _, n := range r.o.scale {
		if ctx.Err() != nil {
			break
		}
		// The server holds a descriptor per session, and so does the
		// load generator: leave each some for everything else.
		if most := int(nofile) - 1500; nofile > 0 && n > most {
			r.skip(fmt.Sprintf("scale step of %d sessions: the open-file limit (%d) allows %d; measuring %d", n, nofile, most, most))
			n = most
		}
		if n < 2 {
			break
		}
		r.logf("scale: baton, %d sessions", n)
		sc, err := scenario.Scale(ctx, scenario.ScaleConfig{
			Sessions: n, ShortLease: r.o.shortLease, LongLease: 30 * time.Second,
			Settle:   pick(r.o.smoke, 5*time.Second, 500*time.Millisecond),
			Window:   pick(r.o.smoke, 10*time.Second, time.Second),
			Probe:    pick(r.o.smoke, 3*time.Second, 500*time.Millisecond),
			BatonBin: r.bin, Dir: r.tmp,
			LoadGen: func(cfg loadgen.Config) (string, []string) { return r.exe, scenario.LoadGenArgs(cfg) },
		})
		if err != nil {
			r.fail("scale with %d sessions: %v", n, err)
			continue
		}
		r.logf("  %d opened; RSS/session %.0f B, heap/session %.0f B, stacks/session %.0f B; %.0f heartbeats/s at %s CPU each; %d lost; handover p50 %s p99 %s",
			sc.Opened, sc.RSSPerSession, sc.HeapPerSession, sc.StackPerSession, sc.HeartbeatsPerSec,
			report.Dur(sc.CPUPerHeartbeat), sc.Lost, report.Dur(sc.Handover.Latency.P50), report.Dur(sc.Handover.Latency.P99))
		r.res.Scale = append(r.res.Scale, sc)
	}
}
