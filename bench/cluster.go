package main

import (
	"context"
	"fmt"
	"time"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/system"
)

// clusterNodes is the size of the cluster the bench measures: the
// smallest that survives losing a node.
const clusterNodes = 3

// runCluster runs the replicated-mode scenarios: "cluster" (handover and
// hot-lock rate on a cluster's leader against a standalone server, in
// alternating rounds) and "failover" (kill -9 and SIGTERM of the leader).
// Each starts its own servers and stops them before it returns.
func runCluster(ctx context.Context, o *options, bin, tmp string, res *report.Results,
	logf func(string, ...any), fail func(string, ...any)) {
	if !o.scenarios["cluster"] && !o.scenarios["failover"] {
		return
	}
	if !want(o, "baton-cluster") {
		return
	}
	cr := &scenario.ClusterResult{Nodes: clusterNodes}
	res.Cluster = cr
	if o.scenarios["cluster"] && ctx.Err() == nil {
		if err := compareCluster(ctx, o, bin, tmp, cr, logf); err != nil {
			fail("cluster against standalone: %v", err)
		}
	}
	if o.scenarios["failover"] && ctx.Err() == nil {
		if err := runFailover(ctx, o, bin, tmp, cr, logf); err != nil {
			fail("failover: %v", err)
		}
	}
}

// compareCluster runs the same handover runs (8 waiters back to back, and
// with a 20 ms hold) against a standalone server and a cluster's leader,
// both up at once, alternating which goes first from round to round so
// that drift in the machine's load falls on both.
func compareCluster(ctx context.Context, o *options, bin, tmp string, cr *scenario.ClusterResult, logf func(string, ...any)) error {
	rounds := 3
	if o.smoke {
		rounds = 1
	}
	cr.Rounds = rounds
	srv, err := batonsys.StartServer(ctx, bin, tmp)
	if err != nil {
		return err
	}
	defer srv.Stop()
	cl, err := batonsys.StartCluster(ctx, bin, tmp, clusterNodes)
	if err != nil {
		return err
	}
	defer cl.Stop()
	leader, err := cl.WaitHealthy(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	logf("cluster: standalone baton at %s (pid %d); %d-node cluster, leader %s at %s (pid %d)",
		srv.Addr, srv.PID(), clusterNodes, leader.ID, leader.Addr, leader.PID())
	idle := 3 * time.Second
	if o.smoke {
		idle = 500 * time.Millisecond
	}
	cr.Idle = idleCPU(ctx, srv, cl, leader, idle)
	if cr.Idle != nil {
		logf("cluster: idle CPU per second: standalone %s, leader %s, each follower %s",
			report.Dur(cr.Idle.Standalone), report.Dur(cr.Idle.Leader), report.Dur(cr.Idle.Followers))
	}
	// The same lease as the standalone rows of the handover table.
	systems := []system.System{
		batonsys.NewSystem(srv, bin, 10*time.Second),
		batonsys.NewClusterSystem(cl, leader, bin, 10*time.Second),
	}
	pids := func(s system.System) (serving int, others []int) {
		if _, ok := s.(*batonsys.ClusterSystem); !ok {
			return srv.PID(), nil
		}
		for _, nd := range cl.Nodes {
			if nd != leader {
				others = append(others, nd.PID())
			}
		}
		return leader.PID(), others
	}
	metrics := func(s system.System) (map[string]float64, error) {
		if cs, ok := s.(*batonsys.ClusterSystem); ok {
			return cs.Metrics(ctx)
		}
		return srv.Metrics(ctx)
	}
	cfgs := []scenario.HandoverConfig{
		{Waiters: 8, Duration: o.duration},
		{Waiters: 8, Hold: baseline.Idle, Duration: o.duration},
	}
	for r := range rounds {
		order := systems
		if r%2 == 1 {
			order = []system.System{systems[1], systems[0]}
		}
		for i, cfg := range cfgs {
			for _, s := range order {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				cfg.Name = fmt.Sprintf("cluster-cmp-%d-%d", r, i)
				serving, others := pids(s)
				u0, _ := batonsys.ReadUsage(serving)
				var f0 time.Duration
				for _, p := range others {
					u, _ := batonsys.ReadUsage(p)
					f0 += u.CPU
				}
				m0, _ := metrics(s)
				h, err := scenario.Handover(ctx, s, cfg)
				if err != nil {
					return fmt.Errorf("%s, %d waiters, hold %v: %w", s.Name(), cfg.Waiters, cfg.Hold, err)
				}
				run := scenario.ClusterRun{HandoverResult: h, Round: r}
				if u1, err := batonsys.ReadUsage(serving); err == nil {
					run.ServerCPU = u1.CPU - u0.CPU
				}
				for _, p := range others {
					u, _ := batonsys.ReadUsage(p)
					run.FollowersCPU += u.CPU
				}
				if len(others) > 0 {
					run.FollowersCPU -= f0
				}
				if m1, err := metrics(s); err == nil && m0 != nil {
					if n := m1["baton_handover_latency_seconds_count"] - m0["baton_handover_latency_seconds_count"]; n > 0 {
						sum := m1["baton_handover_latency_seconds_sum"] - m0["baton_handover_latency_seconds_sum"]
						run.ServerMean = time.Duration(sum / n * 1e9)
					}
				}
				logf("cluster round %d: %s, %d waiters, hold %v: p50 %s p99 %s; %.0f handoffs/s; server CPU %s/handoff",
					r+1, s.Name(), cfg.Waiters, cfg.Hold, report.Dur(h.Latency.P50), report.Dur(h.Latency.P99), h.HandoffsPerSec,
					report.Dur(run.ServerCPU/time.Duration(max(h.Latency.N, 1))))
				cr.Runs = append(cr.Runs, run)
			}
		}
	}
	// The leader must still be the leader: a run on a node that lost its
	// leadership would have measured errors, not handovers.
	if now, err := cl.Leader(ctx, time.Second); err != nil || now != leader {
		return fmt.Errorf("the leader changed during the comparison (%v)", err)
	}
	return nil
}

// runFailover runs the failover scenario on a fresh cluster, every
// session with a 1 s lease.
func runFailover(ctx context.Context, o *options, bin, tmp string, cr *scenario.ClusterResult, logf func(string, ...any)) error {
	cl, err := batonsys.StartCluster(ctx, bin, tmp, clusterNodes)
	if err != nil {
		return err
	}
	defer cl.Stop()
	cfg := scenario.FailoverConfig{Faults: o.failovers, Names: 3, Waiters: 2, Lease: time.Second}
	cfg.Progress = func(n int, kind string, first time.Duration) {
		if n%10 == 0 || n == 2*cfg.Faults {
			logf("  failover: %d of %d faults done; the last (%s): first grant after %s", n, 2*cfg.Faults, kind, report.Dur(first))
		}
	}
	logf("failover: %d-node cluster, %d kill -9 and %d SIGTERM of the leader, %d names with a holder and %d waiters, lease %v",
		clusterNodes, cfg.Faults, cfg.Faults, cfg.Names, cfg.Waiters, cfg.Lease)
	f, err := scenario.Failover(ctx, cl, cfg)
	cr.Failover = &f
	for _, fr := range []scenario.FaultResult{f.Kill, f.Term} {
		logf("  %s: first grant p50 %s p99 %s max %s (new leader queueing p50 %s); every name p50 %s p99 %s; %d failed, %d tokens not above the old holder's",
			fr.Kind, report.Dur(fr.FirstGrant.P50), report.Dur(fr.FirstGrant.P99), report.Dur(fr.FirstGrant.Max), report.Dur(fr.Elected.P50),
			report.Dur(fr.AllGranted.P50), report.Dur(fr.AllGranted.P99), fr.Failed, fr.Backwards)
	}
	if err != nil {
		return err
	}
	if n := f.Kill.Failed + f.Term.Failed; n > 0 {
		return fmt.Errorf("%d faults left a name without a new holder (last: %s %s)", n, f.Kill.LastError, f.Term.LastError)
	}
	if n := f.Kill.Backwards + f.Term.Backwards; n > 0 {
		return fmt.Errorf("%d grants after a failover with a token not above the old holder's", n)
	}
	return nil
}

// idleCPU measures each server process's CPU per second over window with
// no client connected; nil if /proc could not be read.
func idleCPU(ctx context.Context, srv *batonsys.Server, cl *batonsys.Cluster, leader *batonsys.Node, window time.Duration) *scenario.ClusterIdle {
	pids := []int{srv.PID(), leader.PID()}
	for _, nd := range cl.Nodes {
		if nd != leader {
			pids = append(pids, nd.PID())
		}
	}
	read := func() ([]time.Duration, bool) {
		var cpu []time.Duration
		for _, p := range pids {
			u, err := batonsys.ReadUsage(p)
			if err != nil {
				return nil, false
			}
			cpu = append(cpu, u.CPU)
		}
		return cpu, true
	}
	c0, ok := read()
	t0 := time.Now()
	if !ok {
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(window):
	}
	c1, ok := read()
	el := time.Since(t0)
	if !ok {
		return nil
	}
	perSec := func(d time.Duration) time.Duration { return time.Duration(float64(d) / el.Seconds()) }
	id := &scenario.ClusterIdle{Window: el, Standalone: perSec(c1[0] - c0[0]), Leader: perSec(c1[1] - c0[1])}
	var f time.Duration
	for i := 2; i < len(pids); i++ {
		f += c1[i] - c0[i]
	}
	id.Followers = perSec(f / time.Duration(len(pids)-2))
	return id
}
