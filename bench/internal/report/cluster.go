package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// ClusterTarget is the target of replicated mode: a cluster's leader within 10 % of a
// standalone server on handover latency and hot-lock rate.
const ClusterTarget = 0.10

// FailoverTarget is the failover target: with 1 s leases, the first grant on
// the new leader within 2.5 s of a kill -9 of the old one (p99).
const FailoverTarget = 2500 * time.Millisecond

// ClusterMarkdown renders the replicated-mode tables, or "" when the run
// had none.
func ClusterMarkdown(r *Results) string {
	c := r.Cluster
	if c == nil || (len(c.Runs) == 0 && c.Failover == nil) {
		return ""
	}
	var b strings.Builder
	if len(c.NodeFlags) > 0 {
		fmt.Fprintf(&b, "Every node of the cluster scenarios below ran with `%s` beyond the defaults.\n\n", strings.Join(c.NodeFlags, " "))
	}
	if len(c.Runs) > 0 {
		clusterComparison(&b, c)
		clusterRuns(&b, c)
	}
	if f := c.Failover; f != nil {
		failoverTable(&b, f)
	}
	return b.String()
}

// clusterComparison is the table of the cluster's leader against the
// standalone server, medians over the rounds.
func clusterComparison(b *strings.Builder, c *scenario.ClusterResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Replicated mode: a %d-node cluster's leader against standalone Baton\n\n", c.Nodes)
	w("Both up at once, the same handover runs (8 waiters, the Go client, 10 s leases), alternating which system goes first from round to round; the clients of the cluster are given every node's address, the leader's first. Figures are the median over %d round(s) of each run's own p50, p99 and handoffs/s. Target: the cluster within %.0f %% of standalone.\n\n", c.Rounds, ClusterTarget*100)
	w("| measure | standalone | cluster | cluster / standalone | target | verdict |\n|---|---:|---:|---:|---|---|\n")
	for _, hold := range []time.Duration{0, baseline.Idle} {
		s, ok1 := c.Median("baton", 8, hold)
		k, ok2 := c.Median("baton-cluster", 8, hold)
		if !ok1 || !ok2 {
			continue
		}
		what := "back to back"
		if hold > 0 {
			what = "after a " + Dur(hold) + " hold"
		}
		lat := func(name string, a, b time.Duration) {
			ratio := float64(b) / float64(a)
			w("| handover %s, %s | %s | %s | %.2f | ≤ %.2f | %s |\n", name, what, Dur(a), Dur(b), ratio, 1+ClusterTarget, slower(ratio))
		}
		lat("p50", s.P50, k.P50)
		lat("p99", s.P99, k.P99)
		ratio := k.HandoffsPerSec / s.HandoffsPerSec
		v := "met"
		if ratio < 1-ClusterTarget {
			v = fmt.Sprintf("not met: %.0f %% fewer", (1-ratio)*100)
		}
		w("| hot-lock rate (handoffs/s), %s | %.0f | %.0f | %.2f | ≥ %.2f | %s |\n", what, s.HandoffsPerSec, k.HandoffsPerSec, ratio, 1-ClusterTarget, v)
		if s.ServerMean > 0 && k.ServerMean > 0 {
			w("| (context) server's own mean handover, %s | %s | %s | %.2f | – | – |\n", what, Dur(s.ServerMean), Dur(k.ServerMean), float64(k.ServerMean)/float64(s.ServerMean))
		}
		if s.CPUPerHandoff > 0 && k.CPUPerHandoff > 0 {
			w("| (context) serving process's CPU per handoff, %s | %s | %s (followers: %s) | %.2f | – | – |\n", what,
				Dur(s.CPUPerHandoff), Dur(k.CPUPerHandoff), Dur(k.FollowersPerHandoff), float64(k.CPUPerHandoff)/float64(s.CPUPerHandoff))
		}
	}
	if id := c.Idle; id != nil {
		w("| (context) CPU per second with no client (%s window) | %s | leader %s, each follower %s | – | – | – |\n",
			Dur(id.Window.Round(time.Millisecond)), Dur(id.Standalone), Dur(id.Leader), Dur(id.Followers))
	}
	if c.LeaderChanges > 0 {
		w("\nThe cluster's leader changed during %d run(s) with no fault injected (a spurious election: on a loaded machine a leader can miss its leader lease, 150 ms by default); such a run measures a failover, not the steady state, and was run again. The last: %s.\n", c.LeaderChanges, c.LastLeaderChange)
	}
}

// clusterRuns lists every run of the cluster comparison.
func clusterRuns(b *strings.Builder, c *scenario.ClusterResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("\nEvery run:\n\n")
	w("| round | system | hold | n | p50 | p99 | max | handoffs/s | errors | server mean | serving CPU / handoff | followers' CPU / handoff |\n")
	w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range c.Runs {
		hold := "none"
		if run.Hold > 0 {
			hold = Dur(run.Hold)
		}
		n := time.Duration(max(run.Latency.N, 1))
		fol := "–"
		if run.FollowersCPU > 0 {
			fol = Dur(run.FollowersCPU / n)
		}
		w("| %d | %s | %s | %d | %s | %s | %s | %.0f | %d | %s | %s | %s |\n", run.Round+1, run.System, hold, run.Latency.N,
			Dur(run.Latency.P50), Dur(run.Latency.P99), Dur(run.Latency.Max), run.HandoffsPerSec, run.Errors,
			Dur(run.ServerMean), Dur(run.ServerCPU/n), fol)
	}
	w("\n")
}

// failoverTable is the failover scenario's table and what to read beside
// it.
func failoverTable(b *strings.Builder, f *scenario.FailoverResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Replicated mode: failover of the leader\n\n")
	w("%d nodes; before each fault %d names each have a holder and %d queued waiters on the leader, every session with a %s lease (so the lease bound is %s). The holders close on any ERROR; the waiters then look for the new leader among the nodes' addresses (following the `NOT_LEADER` hint, 1 to 3 ms apart) and queue again. Times run from the signal to the waiters' receipt of frames from a node other than the old leader: *serving* is the first WAITING or ACQUIRED (the new leader has committed its epoch), *first grant* the first ACQUIRED (after the grace), *every name* when the last of the %d names had a new holder. The two kinds alternate; after each fault the old leader is started again with its data directory and the next fault waits for a healthy cluster.\n\n",
		f.Nodes, f.Names, f.Waiters, Dur(f.Lease), Dur(f.Lease), f.Names)
	w("| fault | n | serving p50 / p99 | first grant p50 | first grant p99 | first grant max | every name p50 / p99 | faults with a second new leader | first grant p50 / p99 with one new leader | failed | tokens not rising |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, fr := range []scenario.FaultResult{f.Kill, f.Term} {
		w("| %s | %d | %s / %s | %s | %s | %s | %s / %s | %d | %s / %s | %d | %d |\n", fr.Kind, fr.FirstGrant.N, Dur(fr.Elected.P50), Dur(fr.Elected.P99),
			Dur(fr.FirstGrant.P50), Dur(fr.FirstGrant.P99), Dur(fr.FirstGrant.Max), Dur(fr.AllGranted.P50), Dur(fr.AllGranted.P99),
			fr.MultiLeader, Dur(fr.OneLeader.P50), Dur(fr.OneLeader.P99), fr.Failed, fr.Backwards)
	}
	w("\nA second new leader: the epoch of the first grant is more than one above the old holder's, so a leader elected after the fault lost its leadership before it granted anything, and the next one's grace started over.\n")
	if fr := f.Kill; fr.FirstGrant.N > 0 && f.Lease == time.Second {
		v := "met"
		if fr.FirstGrant.P99 > FailoverTarget {
			v = fmt.Sprintf("not met: %s over", Dur(fr.FirstGrant.P99-FailoverTarget))
		}
		w("\nGoal: with 1 s leases, first grant on the new leader within %s of a kill -9 of the leader, p99 over %d faults: %s, **%s**.\n", Dur(FailoverTarget), fr.FirstGrant.N, Dur(fr.FirstGrant.P99), v)
	}
	if f.SetupRetries > 0 {
		w("\n%d time(s) the leader changed (or refused a session) while a fault was being set up, before any signal, and the fault was set up again; the last: %s\n", f.SetupRetries, f.LastSetupError)
	}
	for _, fr := range []scenario.FaultResult{f.Kill, f.Term} {
		if fr.LastError != "" {
			w("\n%s: last error: %s\n", fr.Kind, fr.LastError)
		}
	}
	w("\n")
}

// slower is the verdict on a latency ratio against ClusterTarget.
func slower(ratio float64) string {
	if ratio <= 1+ClusterTarget {
		return "met"
	}
	return fmt.Sprintf("not met: %.0f %% slower", (ratio-1)*100)
}
