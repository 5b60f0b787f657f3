package main

import (
	"context"
	"fmt"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// rollingSizes are the rolling scenario's flags.
type rollingSizes struct {
	names, waiters int
	lease          time.Duration
	steps          []string
}

// rollingScenario: a rolling restart of every node of a 3-node cluster
// (the followers, then the leader, as docs/operations.md says), and by
// default a kill -9 of the leader after it, under holders that hold
// through it all and waiters queued behind them: claims lost, overlaps,
// queue order, and how long the claims were between nodes.
type rollingScenario struct{ noServer }

func (rollingScenario) Name() string { return "rolling" }

func (rollingScenario) Run(ctx context.Context, r *runner) {
	cr := r.clusterResult()
	if cr == nil || ctx.Err() != nil {
		return
	}
	if err := runRolling(ctx, r.o, r.bin, r.tmp, cr, r.logf); err != nil {
		r.fail("rolling: %v", err)
	}
}

// runRolling runs the rolling scenario on a fresh cluster.
func runRolling(ctx context.Context, o *options, bin, tmp string, cr *scenario.ClusterResult, logf func(string, ...any)) error {
	// Every client dials from 127.0.0.1, standing for many hosts: the
	// nodes take more connections from one address than the default
	// 1,024 (a claim on the move has two for a moment).
	flags := append([]string{"-max-conns-per-ip", "4096"}, o.clusterFlags...)
	cl, err := batonsys.StartCluster(ctx, bin, tmp, clusterNodes, flags...)
	if err != nil {
		return err
	}
	defer cl.Stop()
	cfg := scenario.RollingConfig{
		Names: o.rolling.names, Waiters: o.rolling.waiters, Lease: o.rolling.lease,
		Probes: pick(o.smoke, 4, 1), ProbeContenders: pick(o.smoke, 3, 2), ProbeHold: 20 * time.Millisecond,
		Hold: 2 * time.Millisecond, Steps: o.rolling.steps, Logf: logf,
	}
	logf("rolling: %d-node cluster, %d holders with %d waiters each, %v leases; steps %v", clusterNodes, cfg.Names, cfg.Waiters, cfg.Lease, cfg.Steps)
	rr, err := scenario.Rolling(ctx, cl, cfg)
	cr.Rolling = &rr
	for i, st := range rr.Steps {
		logf("  step %d (%s %s): first grant %s, longest gap %s; %d holder and %d waiter moves, longest %s; longest unconfirmed %s; %d holders lost, %d places lost; one name waited %s at most",
			i+1, st.Kind, st.Node, report.Dur(st.FirstGrant), report.Dur(st.LongestGap), st.HolderMoves, st.WaiterMoves,
			report.Dur(st.LongestMove), report.Dur(st.MostUnconfirmed), st.Lost, st.PlacesLost, report.Dur(st.NameGap))
	}
	logf("  %d grants checked: %d holders lost, %d waiters failed, %d places lost, %d overlaps, %d tokens not rising, %d names out of order; waiters drained in %s",
		rr.Grants, rr.HoldersLost, rr.WaitersFailed, rr.PlacesLost, rr.Overlaps, rr.TokensFell, rr.OutOfOrder, report.Dur(rr.Drain))
	if err != nil {
		for _, nd := range cl.Nodes {
			logf("  %s's log, the end: %s", nd.ID, tailOf(nd.Log(), 1500))
		}
		return fmt.Errorf("%w", err)
	}
	return nil
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
