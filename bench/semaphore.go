package main

import (
	"context"
	"fmt"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/peers"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/system"
)

// The semaphore scenario's size: 16 contenders on 4 slots, each slot held
// back to back and for 1 ms (a short piece of work).
const (
	semLimit      = 4
	semContenders = 16
)

var semHolds = []time.Duration{0, time.Millisecond}

// semSystem is a semaphore service and the process whose CPU it costs.
type semSystem struct {
	sys system.Semaphores
	pid int
}

// semaphoreScenario: Baton (the shared server, raw version 2 frames)
// and, outside -smoke, dflockd both ways, in -semaphore-rounds rounds
// whose order of systems turns each round.
type semaphoreScenario struct{ sharedServer }

func (semaphoreScenario) Name() string { return "semaphore" }

func (semaphoreScenario) Run(ctx context.Context, r *runner) {
	srv, o := r.srv, r.o
	var systems []semSystem
	if srv != nil && (r.want("baton") || r.want("baton-wire")) {
		systems = append(systems, semSystem{batonsys.NewRawSystem(srv), srv.PID()})
	}
	if !o.smoke && (r.want("dflockd") || r.want("dflockd-conn")) {
		dflockd, err := startDflockd(ctx, o, r.logf)
		if err != nil {
			r.res.Skipped = append(r.res.Skipped, err.Error())
			r.logf("skipped: %v", err)
		} else {
			defer dflockd.Stop()
			for _, v := range []peers.DflockdOptions{{Name: "dflockd"}, {Name: "dflockd-conn", KeepConnection: true}} {
				if r.want(v.Name) {
					v.Version = dflockd.Version
					systems = append(systems, semSystem{peers.NewDflockd(dflockd.Addr, v), dflockd.PID()})
				}
			}
		}
	}
	var live []semSystem
	for _, s := range systems {
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := s.sys.Version(vctx)
		cancel()
		if err != nil {
			r.failOrSkip(s.sys.Name(), "semaphore %s: %v", s.sys.Name(), err)
			continue
		}
		if _, ok := r.res.Versions[s.sys.Name()]; !ok {
			r.res.Versions[s.sys.Name()] = v
		}
		live = append(live, s)
	}
	semRounds(ctx, r, live)
}

// semRounds runs the semaphore scenario's rounds over the live systems.
func semRounds(ctx context.Context, r *runner, live []semSystem) {
	srv, o := r.srv, r.o
	for round := range o.semRounds {
		for hi, hold := range semHolds {
			for i := range live {
				if ctx.Err() != nil {
					return
				}
				s := live[(i+round)%len(live)]
				cfg := scenario.SemaphoreConfig{Limit: semLimit, Contenders: semContenders, Hold: hold, Duration: o.duration,
					Name: fmt.Sprintf("sem-%s-r%d-h%d", s.sys.Name(), round, hi), Round: round + 1, ServerPID: s.pid}
				r.logf("semaphore: %s, round %d, limit %d, %d contenders, hold %v, %v", s.sys.Name(), round+1, cfg.Limit, cfg.Contenders, hold, cfg.Duration)
				var m0 map[string]float64
				if srv != nil && s.pid == srv.PID() {
					m0, _ = srv.Metrics(ctx)
				}
				sr, err := scenario.Semaphore(ctx, s.sys, cfg)
				if m0 != nil {
					sr.ServerMean = serverHandoverMean(ctx, srv, m0)
				}
				if err != nil {
					r.failOrSkip(s.sys.Name(), "semaphore %s, hold %v: %v", s.sys.Name(), hold, err)
					continue
				}
				mean := ""
				if sr.ServerMean > 0 {
					mean = " (server mean " + report.Dur(sr.ServerMean) + ")"
				}
				r.logf("  handover p50 %s p99 %s%s; %.0f slot changes/s; server CPU %s each; at most %d holders; fairness %s; %d errors",
					report.Dur(sr.Handover.P50), report.Dur(sr.Handover.P99), mean, sr.SlotChangesPerSec, report.Dur(sr.ServerCPUPerChange),
					sr.MostHolders, report.Fairness(sr.GrantsMin, sr.GrantsMax), sr.Errors)
				r.res.Semaphore = append(r.res.Semaphore, sr)
			}
		}
	}
}

// startDflockd finds the dflockd binary and runs it; the error says why
// dflockd is left out.
func startDflockd(ctx context.Context, o *options, logf func(string, ...any)) (*peers.DflockdServer, error) {
	bin, err := peers.FindDflockd(o.dflockd)
	if err != nil {
		return nil, err
	}
	d, err := peers.StartDflockd(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("dflockd: %w: %v", system.ErrUnavailable, err)
	}
	logf("dflockd %s serving at %s (pid %d)", d.Version, d.Addr, d.PID())
	return d, nil
}
