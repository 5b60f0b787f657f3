package cluster

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics adds the node's gauges to reg (the server's registry):
// role, term, epoch, leader changes, lease bound, grace remaining, leader
// lease lapses, the Raft port's refusals, and on the leader every
// member's health.
func (n *Node) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(newHealthCollector(n))
	if rt, ok := n.transport.(*leaseTransport).Transport.(*raftTransport); ok {
		for r, name := range refusalNames {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "baton_cluster_raft_refusals_total",
				Help:        "Connections the Raft port closed before Raft saw them, by reason (the handshake bounds of accept.go, and the founders' question refused on plain TCP).",
				ConstLabels: prometheus.Labels{"reason": name}},
				func() float64 { return float64(rt.stream.refused[r].Load()) }))
		}
		if rt.stream.hs != nil {
			rt.stream.hs.Register(reg) // baton_handshakes_cut_total{listener="raft"}
		}
	}
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

// healthCollector exports each member's health and the cluster's, from
// the leader only (a follower does not know them): series per member are
// bounded by the membership.
type healthCollector struct {
	n                                         *Node
	healthy, reachable, lastContact, lag      *prometheus.Desc
	clusterHealthy, votersHealthy, toleration *prometheus.Desc
}

func newHealthCollector(n *Node) *healthCollector {
	member := []string{"member"}
	return &healthCollector{
		n:              n,
		healthy:        prometheus.NewDesc("baton_cluster_member_healthy", "1 while the member is reachable and at most 250 log entries behind (the leader's view).", member, nil),
		reachable:      prometheus.NewDesc("baton_cluster_member_reachable", "1 while the member answered the leader within five heartbeat timeouts (at least 1 s).", member, nil),
		lastContact:    prometheus.NewDesc("baton_cluster_member_last_contact_seconds", "Time since the member's latest reply to the leader (absent if it never replied).", member, nil),
		lag:            prometheus.NewDesc("baton_cluster_member_index_lag", "Log entries the member is behind the leader.", member, nil),
		clusterHealthy: prometheus.NewDesc("baton_cluster_healthy", "1 while every member is healthy (exported by the leader).", nil, nil),
		votersHealthy:  prometheus.NewDesc("baton_cluster_voters_healthy", "Healthy voters (exported by the leader).", nil, nil),
		toleration:     prometheus.NewDesc("baton_cluster_failure_tolerance", "Voters that may still fail before the cluster loses its quorum (exported by the leader).", nil, nil),
	}
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.healthy, c.reachable, c.lastContact, c.lag, c.clusterHealthy, c.votersHealthy, c.toleration} {
		ch <- d
	}
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.n.View()
	if v.Healthy == nil {
		return
	}
	for _, m := range v.Members {
		h := m.Health
		if h == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, b2f(h.Healthy), m.ID)
		ch <- prometheus.MustNewConstMetric(c.reachable, prometheus.GaugeValue, b2f(h.Reachable), m.ID)
		if h.LastContact >= 0 {
			ch <- prometheus.MustNewConstMetric(c.lastContact, prometheus.GaugeValue, h.LastContact.Seconds(), m.ID)
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(h.IndexLag), m.ID)
	}
	ch <- prometheus.MustNewConstMetric(c.clusterHealthy, prometheus.GaugeValue, b2f(*v.Healthy))
	ch <- prometheus.MustNewConstMetric(c.votersHealthy, prometheus.GaugeValue, float64(v.VotersHealthy))
	ch <- prometheus.MustNewConstMetric(c.toleration, prometheus.GaugeValue, float64(v.FailureTolerance))
}
