package scenario

import (
	"slices"
	"time"
)

// ClusterRun is one handover run in the cluster comparison: standalone
// Baton ("baton") or the leader of a 3-node cluster ("baton-cluster"),
// with the CPU the server processes spent over it.
type ClusterRun struct {
	HandoverResult
	Round int `json:"round"`
	// ServerCPU is the CPU time of the process serving the sessions (the
	// standalone server, or the leader) over the run; FollowersCPU is the
	// other nodes' together (0 for standalone).
	Cost
	FollowersCPU time.Duration `json:"followers_cpu_ns,omitempty"`
}

// ClusterResult is the replicated-mode section of a run: handover and
// hot-lock rate of a cluster's leader against a standalone server, in
// alternating rounds, and the failover scenario.
type ClusterResult struct {
	Nodes  int `json:"nodes"`
	Rounds int `json:"rounds"`
	// NodeFlags are the flags every node got beyond the defaults.
	NodeFlags []string     `json:"node_flags,omitempty"`
	Runs      []ClusterRun `json:"runs,omitempty"`
	// Idle is the CPU each server process spent per second with no client
	// at all, before the rounds: what Raft costs in the background.
	Idle *ClusterIdle `json:"idle,omitempty"`
	// LeaderChanges counts comparison runs during which the cluster's
	// leader changed with no fault injected (a spurious election on a
	// loaded machine); each was run again and is not in Runs.
	LeaderChanges    int             `json:"leader_changes,omitempty"`
	LastLeaderChange string          `json:"last_leader_change,omitempty"`
	Failover         *FailoverResult `json:"failover,omitempty"`
}

// ClusterIdle is CPU time per second of an idle window.
type ClusterIdle struct {
	Window     time.Duration `json:"window_ns"`
	Standalone time.Duration `json:"standalone_ns"`
	Leader     time.Duration `json:"leader_ns"`
	Followers  time.Duration `json:"followers_ns"` // the mean of the followers
}

// ClusterFigure is the median over rounds of one system and one handover
// configuration.
type ClusterFigure struct {
	System         string
	Waiters        int
	Hold           time.Duration
	Rounds         int
	P50, P99       time.Duration
	HandoffsPerSec float64
	ServerMean     time.Duration
	// CPUPerHandoff is the serving process's CPU per handoff; FollowersCPU
	// per handoff is the other nodes' share.
	CPUPerHandoff, FollowersPerHandoff time.Duration
}

// Median is the median over rounds of the runs of sys with waiters and
// hold (each figure's own median), and false if there is none.
func (r *ClusterResult) Median(sys string, waiters int, hold time.Duration) (ClusterFigure, bool) {
	f := ClusterFigure{System: sys, Waiters: waiters, Hold: hold}
	var p50, p99, sm, cpu, fol []time.Duration
	var rate []float64
	for _, run := range r.Runs {
		if run.System != sys || run.Waiters != waiters || run.Hold != hold || run.Latency.N == 0 {
			continue
		}
		p50 = append(p50, run.Latency.P50)
		p99 = append(p99, run.Latency.P99)
		rate = append(rate, run.HandoffsPerSec)
		sm = append(sm, run.ServerMean)
		n := time.Duration(run.Latency.N)
		cpu = append(cpu, run.ServerCPU/n)
		fol = append(fol, run.FollowersCPU/n)
	}
	if len(p50) == 0 {
		return f, false
	}
	f.Rounds = len(p50)
	f.P50, f.P99, f.ServerMean = median(p50), median(p99), median(sm)
	f.CPUPerHandoff, f.FollowersPerHandoff = median(cpu), median(fol)
	slices.Sort(rate)
	f.HandoffsPerSec = rate[len(rate)/2]
	if len(rate)%2 == 0 {
		f.HandoffsPerSec = (rate[len(rate)/2-1] + rate[len(rate)/2]) / 2
	}
	return f, true
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
