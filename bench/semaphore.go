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

// runSemaphore runs the semaphore scenario: Baton (srv, raw version 2
// frames) and, outside -smoke, dflockd both ways, in o.semRounds rounds
// whose order of systems turns each round.
func runSemaphore(ctx context.Context, o *options, srv *batonsys.Server, res *report.Results,
	logf func(string, ...any), failOrSkip func(string, string, ...any)) {
	var systems []semSystem
	if srv != nil && (want(o, "baton") || want(o, "baton-wire")) {
		systems = append(systems, semSystem{batonsys.NewRawSystem(srv), srv.PID()})
	}
	if !o.smoke && (want(o, "dflockd") || want(o, "dflockd-conn")) {
		dflockd, err := startDflockd(ctx, o, logf)
		if err != nil {
			res.Skipped = append(res.Skipped, err.Error())
			logf("skipped: %v", err)
		} else {
			defer dflockd.Stop()
			for _, v := range []peers.DflockdOptions{{Name: "dflockd"}, {Name: "dflockd-conn", KeepConnection: true}} {
				if want(o, v.Name) {
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
			failOrSkip(s.sys.Name(), "semaphore %s: %v", s.sys.Name(), err)
			continue
		}
		if _, ok := res.Versions[s.sys.Name()]; !ok {
			res.Versions[s.sys.Name()] = v
		}
		live = append(live, s)
	}
	for round := range o.semRounds {
		for hi, hold := range semHolds {
			for i := range live {
				if ctx.Err() != nil {
					return
				}
				s := live[(i+round)%len(live)]
				cfg := scenario.SemaphoreConfig{Limit: semLimit, Contenders: semContenders, Hold: hold, Duration: o.duration,
					Name: fmt.Sprintf("sem-%s-r%d-h%d", s.sys.Name(), round, hi), Round: round + 1, ServerPID: s.pid}
				logf("semaphore: %s, round %d, limit %d, %d contenders, hold %v, %v", s.sys.Name(), round+1, cfg.Limit, cfg.Contenders, hold, cfg.Duration)
				var m0 map[string]float64
				if srv != nil && s.pid == srv.PID() {
					m0, _ = srv.Metrics(ctx)
				}
				r, err := scenario.Semaphore(ctx, s.sys, cfg)
				if m0 != nil {
					r.ServerMean = serverHandoverMean(ctx, srv, m0)
				}
				if err != nil {
					failOrSkip(s.sys.Name(), "semaphore %s, hold %v: %v", s.sys.Name(), hold, err)
					continue
				}
				mean := ""
				if r.ServerMean > 0 {
					mean = " (server mean " + report.Dur(r.ServerMean) + ")"
				}
				logf("  handover p50 %s p99 %s%s; %.0f slot changes/s; server CPU %s each; at most %d holders; fairness %s; %d errors",
					report.Dur(r.Handover.P50), report.Dur(r.Handover.P99), mean, r.SlotChangesPerSec, report.Dur(r.ServerCPUPerChange),
					r.MostHolders, report.Fairness(r.GrantsMin, r.GrantsMax), r.Errors)
				res.Semaphore = append(res.Semaphore, r)
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
