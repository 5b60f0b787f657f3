package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
)

// startProbes starts ProbeContenders clients on each of the Probes names,
// taking and releasing their name until pctx ends, each grant recorded.
func (r *rollingRun) startProbes(pctx context.Context) error {
	r.byName = map[string][]time.Time{}
	r.probeBeliefs = map[string][]belief{}
	for k := range r.cfg.Probes {
		name := fmt.Sprintf("rolling-probe-%d", k)
		for j := range r.cfg.ProbeContenders {
			p, err := newParticipant(r.addrs, r.cfg.Lease, name, -2, fmt.Sprintf("probe-%d-%d", k, j))
			if err != nil {
				return err
			}
			r.probes = append(r.probes, p)
			r.pwg.Add(1)
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer r.pwg.Done()
				r.probe(pctx, p, name)
			}()
		}
	}
	return nil
}

// probe is one probe client's loop: acquire, hold ProbeHold, release.
func (r *rollingRun) probe(pctx context.Context, p *participant, name string) {
	for pctx.Err() == nil {
		if _, err := p.acquire(pctx, nil); err != nil {
			if pctx.Err() == nil {
				r.probeMu.Lock()
				r.res.ProbeErrors++
				r.probeMu.Unlock()
				r.problem("probe %s: %v", name, err)
				pause(pctx, 50*time.Millisecond)
			}
			continue
		}
		g := p.belief().granted
		r.probeMu.Lock()
		r.probeGrants = append(r.probeGrants, g)
		r.byName[name] = append(r.byName[name], g)
		r.probeMu.Unlock()
		pause(pctx, r.cfg.ProbeHold)
		b := p.release()
		r.probeMu.Lock()
		r.probeBeliefs[name] = append(r.probeBeliefs[name], b)
		r.probeMu.Unlock()
	}
}

// startSampler samples, every 50 ms until sctx ends, the longest any
// holder has gone without a confirmed frame: 0.8 × lease minus its time
// left.
func (r *rollingRun) startSampler(sctx context.Context) {
	r.lastValid = make([]time.Time, r.cfg.Names)
	r.sampWG.Add(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.sampWG.Done()
		deadline := r.cfg.Lease * 4 / 5
		for sctx.Err() == nil {
			now := time.Now()
			most := time.Duration(0)
			for k, h := range r.holders {
				h.mu.Lock()
				l := h.lock
				h.mu.Unlock()
				if l == nil || l.Err() != nil {
					continue
				}
				v := l.ValidUntil()
				if v.IsZero() {
					continue
				}
				r.sampMu.Lock()
				r.lastValid[k] = v
				r.sampMu.Unlock()
				most = max(most, deadline-v.Sub(now))
			}
			r.sampMu.Lock()
			r.samples = append(r.samples, unconfirmedSample{now, most})
			r.sampMu.Unlock()
			pause(sctx, 50*time.Millisecond)
		}
	}()
}

// step runs the i-th step: the node its kind names is stopped and started
// again, then the step waits until the node follows a leader, the
// cluster is healthy, no claim is pending and a probe name is granted.
func (r *rollingRun) step(i int, kind string) error {
	leader, err := r.cl.WaitHealthy(r.ctx, time.Minute)
	if err != nil {
		return fmt.Errorf("before step %d: %w", i+1, err)
	}
	nd, err := r.stepNode(i, kind, leader)
	if err != nil {
		return err
	}
	r.restarted[nd] = true
	st := RollingStep{Kind: kind, Node: nd.ID}
	start := time.Now()
	if kind == StepCrash {
		err = r.cl.Kill(nd)
	} else {
		err = r.cl.Term(nd, 30*time.Second)
	}
	st.Stopped = time.Since(start)
	if err != nil {
		r.cl.Start(r.ctx, nd)
		return fmt.Errorf("step %d (%s of %s): %w", i+1, kind, nd.ID, err)
	}
	lastWords := nd.Log() // its log goes with the restart
	if err := r.cl.Start(r.ctx, nd); err != nil {
		return fmt.Errorf("step %d: starting %s again: %w", i+1, nd.ID, err)
	}
	if err := r.waitMember(i, nd, start); err != nil {
		return err
	}
	st.Member = time.Since(start)
	newLeader, err := r.cl.WaitHealthy(r.ctx, time.Minute)
	if err != nil {
		return fmt.Errorf("step %d: %w", i+1, err)
	}
	st.Healthy = time.Since(start)
	if err := r.waitClaimsBack(i, newLeader, start); err != nil {
		return err
	}
	st.ClaimsBack = time.Since(start)
	if err := r.waitProbeGrant(i, start); err != nil {
		return err
	}
	if m, err := batonsys.FetchMetrics(r.ctx, "http://"+newLeader.OpsAddr+"/metrics"); err == nil {
		st.Resumes, st.ResumesRefused, st.PendingLost = m["baton_resumes_total"], m["baton_resumes_refused_total"], m["baton_pending_claims_lost_total"]
	}
	r.res.Steps = append(r.res.Steps, st)
	r.windows = append(r.windows, [2]time.Time{start, time.Now()})
	r.stoppedLogs = append(r.stoppedLogs, lastWords)
	r.logf("  step %d: %s %s: stopped in %v, following again after %v, cluster healthy after %v (leader %s), no claim pending after %v",
		i+1, kind, nd.ID, st.Stopped.Round(time.Millisecond), st.Member.Round(time.Millisecond), st.Healthy.Round(time.Millisecond), newLeader.ID,
		st.ClaimsBack.Round(time.Millisecond))
	return nil
}

// stepNode is the node the i-th step stops: the first follower not
// restarted yet, or the leader.
func (r *rollingRun) stepNode(i int, kind string, leader *batonsys.Node) (*batonsys.Node, error) {
	switch kind {
	case StepFollower:
		for _, n := range r.cl.Nodes {
			if n != leader && !r.restarted[n] {
				return n, nil
			}
		}
		return nil, fmt.Errorf("step %d: every follower was restarted already", i+1)
	case StepLeader, StepCrash:
		return leader, nil
	default:
		return nil, fmt.Errorf("step %d: unknown kind %q", i+1, kind)
	}
}

// waitMember waits until nd, started again, follows a leader.
func (r *rollingRun) waitMember(i int, nd *batonsys.Node, start time.Time) error {
	for !r.cl.Member(r.ctx, nd) {
		if time.Since(start) > time.Minute {
			return fmt.Errorf("step %d: %s not following a leader within a minute of its restart", i+1, nd.ID)
		}
		if !pause(r.ctx, 10*time.Millisecond) {
			return r.ctx.Err()
		}
	}
	return nil
}

// waitClaimsBack waits until the new leader counts no claim of a planned
// handover's list as pending (docs/operations.md's rolling upgrade, step
// 4): every listed claim is back, or its time is up. Waiters spread their
// return over up to lease / 8.
func (r *rollingRun) waitClaimsBack(i int, newLeader *batonsys.Node, start time.Time) error {
	for {
		m, err := batonsys.FetchMetrics(r.ctx, "http://"+newLeader.OpsAddr+"/metrics")
		if err == nil && m["baton_claims_pending"] == 0 {
			return nil
		}
		if time.Since(start) > 2*r.cfg.Lease+time.Minute {
			return fmt.Errorf("step %d: claims still pending on %s %v after the signal", i+1, newLeader.ID, time.Since(start).Round(time.Millisecond))
		}
		if !pause(r.ctx, 10*time.Millisecond) {
			return r.ctx.Err()
		}
	}
}

// waitProbeGrant waits, if there are probes, for a probe grant after the
// signal, before the next step: the cluster grants again.
func (r *rollingRun) waitProbeGrant(i int, start time.Time) error {
	for r.cfg.Probes > 0 {
		r.probeMu.Lock()
		n := len(r.probeGrants)
		last := time.Time{}
		if n > 0 {
			last = r.probeGrants[n-1]
		}
		r.probeMu.Unlock()
		if last.After(start) {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("step %d: no probe grant within 2 minutes of the signal", i+1)
		}
		if !pause(r.ctx, 10*time.Millisecond) {
			return r.ctx.Err()
		}
	}
	return nil
}

// releaseAndDrain stops the probes; then the holders, held through every
// step, release at once, and the waiters drain in their queue order.
func (r *rollingRun) releaseAndDrain(stopProbes context.CancelFunc) error {
	stopProbes()
	r.pwg.Wait()
	drain := time.Now()
	r.holderBeliefs = make([]belief, r.cfg.Names)
	var rwg sync.WaitGroup
	for k, h := range r.holders {
		rwg.Add(1)
		go func() { defer rwg.Done(); r.holderBeliefs[k] = h.release() }()
	}
	rwg.Wait()
	drained := make(chan struct{})
	go func() { r.wwg.Wait(); close(drained) }()
	select {
	case <-drained:
		r.res.Drain = time.Since(drain)
	case <-time.After(2 * time.Minute):
		r.problem("waiters not drained within 2 minutes of the holders' release")
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	return nil
}

// pause sleeps d, or less if ctx ends; it reports whether ctx is live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
