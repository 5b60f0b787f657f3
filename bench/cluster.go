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

// clusterScenario: handover and hot-lock rate on a cluster's leader
// against a standalone server, in alternating rounds.
type clusterScenario struct{ noServer }

func (clusterScenario) Name() string { return "cluster" }

func (clusterScenario) Run(ctx context.Context, r *runner) {
	cr := r.clusterResult()
	if cr == nil || ctx.Err() != nil {
		return
	}
	if err := compareCluster(ctx, r.o, r.bin, r.tmp, cr, r.logf); err != nil {
		r.fail("cluster against standalone: %v", err)
	}
}

// failoverScenario: kill -9 and SIGTERM of a cluster's leader, and how
// soon the new leader grants.
type failoverScenario struct{ noServer }

func (failoverScenario) Name() string { return "failover" }

func (failoverScenario) Run(ctx context.Context, r *runner) {
	cr := r.clusterResult()
	if cr == nil || ctx.Err() != nil {
		return
	}
	if err := runFailover(ctx, r.o, r.bin, r.tmp, cr, r.logf); err != nil {
		r.fail("failover: %v", err)
	}
}

// clusterResult is where the replicated-mode scenarios put their figures,
// made by the first of them; nil when the run leaves out baton-cluster.
// Each starts its own servers and stops them before it returns.
func (r *runner) clusterResult() *scenario.ClusterResult {
	if !r.want("baton-cluster") {
		return nil
	}
	if r.res.Cluster == nil {
		r.res.Cluster = &scenario.ClusterResult{Nodes: clusterNodes, NodeFlags: r.o.clusterFlags}
	}
	return r.res.Cluster
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
	cl, err := batonsys.StartCluster(ctx, bin, tmp, clusterNodes, o.clusterFlags...)
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
	sa := batonsys.NewSystem(srv, bin, 10*time.Second)
	cs := batonsys.NewClusterSystem(cl, leader, bin, 10*time.Second)
	systems := []system.System{sa, cs}
	cfgs := []scenario.HandoverConfig{
		{Waiters: 8, Duration: o.duration},
		{Waiters: 8, Hold: baseline.Idle, Duration: o.duration},
	}
	for r := range rounds {
		order := systems
		if r%2 == 1 {
			order = []system.System{cs, sa}
		}
		for i, cfg := range cfgs {
			for _, s := range order {
				cfg.Name = fmt.Sprintf("cluster-cmp-%d-%d", r, i)
				// A run during which the cluster's leader changed measured
				// a failover, not the leader's steady state: it is
				// counted and run again, at most twice.
				for attempt := 0; ; attempt++ {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					run, changed, err := compareRun(ctx, s, cfg, srv, cl, cs)
					if changed != "" {
						cr.LeaderChanges++
						cr.LastLeaderChange = changed
						logf("cluster round %d: %s, hold %v: %s; run again", r+1, s.Name(), cfg.Hold, changed)
						if attempt < 2 {
							continue
						}
						return fmt.Errorf("the leader changed in 3 runs in a row, the last: %s", changed)
					}
					if err != nil {
						return fmt.Errorf("%s, %d waiters, hold %v: %w", s.Name(), cfg.Waiters, cfg.Hold, err)
					}
					run.Round = r
					logf("cluster round %d: %s, %d waiters, hold %v: p50 %s p99 %s; %.0f handoffs/s; server CPU %s/handoff",
						r+1, s.Name(), cfg.Waiters, cfg.Hold, report.Dur(run.Latency.P50), report.Dur(run.Latency.P99), run.HandoffsPerSec,
						report.Dur(run.ServerCPU/time.Duration(max(run.Latency.N, 1))))
					cr.Runs = append(cr.Runs, run)
					break
				}
			}
		}
	}
	return nil
}

// compareRun is one handover run of s. For the cluster it first waits for
// a healthy cluster and points the clients at its leader, and it reports
// in changed why the run does not count if the leader's epoch moved (or
// the node stopped leading) during it.
func compareRun(ctx context.Context, s system.System, cfg scenario.HandoverConfig, srv *batonsys.Server,
	cl *batonsys.Cluster, cs *batonsys.ClusterSystem) (run scenario.ClusterRun, changed string, err error) {
	serving, metricsURL := srv.PID(), "http://"+srv.OpsAddr+"/metrics"
	var others []int
	var leader *batonsys.Node
	var v0 batonsys.ClusterView
	if s == system.System(cs) {
		if leader, err = cl.WaitHealthy(ctx, time.Minute); err != nil {
			return run, "", err
		}
		if v0, err = cl.View(ctx, leader); err != nil {
			return run, "", err
		}
		cs.SetLeader(leader)
		serving, metricsURL = leader.PID(), "http://"+leader.OpsAddr+"/metrics"
		for _, nd := range cl.Nodes {
			if nd != leader {
				others = append(others, nd.PID())
			}
		}
	}
	cpu := func() (self, rest time.Duration) {
		self, _ = batonsys.ProcessCPU(serving)
		for _, p := range others {
			c, _ := batonsys.ProcessCPU(p)
			rest += c
		}
		return self, rest
	}
	c0, f0 := cpu()
	m0, _ := batonsys.FetchMetrics(ctx, metricsURL)
	h, err := scenario.Handover(ctx, s, cfg)
	c1, f1 := cpu()
	m1, _ := batonsys.FetchMetrics(ctx, metricsURL)
	if leader != nil {
		v1, verr := cl.View(ctx, leader)
		switch {
		case verr != nil:
			return run, fmt.Sprintf("leader %s unreachable after the run: %v", leader.ID, verr), nil
		case v1.Role != "leader" || v1.Epoch != v0.Epoch:
			return run, fmt.Sprintf("leader %s (epoch %d) is now %s, epoch %d", leader.ID, v0.Epoch, v1.Role, v1.Epoch), nil
		}
	}
	if err != nil {
		return run, "", err
	}
	run = scenario.ClusterRun{HandoverResult: h, Cost: scenario.Cost{ServerCPU: c1 - c0}, FollowersCPU: f1 - f0}
	if m0 != nil && m1 != nil {
		run.ServerMean = handoverMean(m0, m1)
	}
	return run, "", nil
}

// runFailover runs the failover scenario on a fresh cluster, every
// session with a 1 s lease.
func runFailover(ctx context.Context, o *options, bin, tmp string, cr *scenario.ClusterResult, logf func(string, ...any)) error {
	cl, err := batonsys.StartCluster(ctx, bin, tmp, clusterNodes, o.clusterFlags...)
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
			c, err := batonsys.ProcessCPU(p)
			if err != nil {
				return nil, false
			}
			cpu = append(cpu, c)
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
