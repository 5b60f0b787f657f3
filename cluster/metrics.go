package cluster

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics adds the node's gauges to reg (the server's registry):
// role, term, epoch, leader changes, lease bound and grace remaining.
func (n *Node) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cluster_leader", Help: "1 while this node leads with its epoch committed, else 0."},
			func() float64 { return b2f(n.leading.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cluster_raft_state", Help: "Raft state: 0 follower, 1 candidate, 2 leader, 3 shutdown."},
			func() float64 {
				if r := n.r(); r != nil {
					return float64(r.State())
				}
				return float64(raft.Follower)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cluster_term", Help: "The current Raft term."},
			func() float64 {
				if r := n.r(); r != nil {
					return float64(r.CurrentTerm())
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cluster_epoch", Help: "The committed epoch (the high bits of every fencing token)."},
			func() float64 { return float64(n.fsm.get().Epoch) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "baton_cluster_leadership_gained_total", Help: "Times this node became the serving leader."},
			func() float64 { return float64(n.leaderChanges.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "baton_cluster_leader_lease_lapses_total", Help: "Terms this node ended itself because its leader lease (anchored at the send times a quorum acknowledged) ran out before a grant or confirmation."},
			func() float64 { return float64(n.leaseLapses.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cluster_lease_bound_seconds", Help: "The committed lease bound: the longest lease a leader may have granted."},
			func() float64 { return n.bound().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cluster_grace_remaining_seconds", Help: "How long this leader still grants nothing after taking over."},
			func() float64 {
				if !n.leading.Load() {
					return 0
				}
				return n.srv.GraceRemaining().Seconds()
			}),
	)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
