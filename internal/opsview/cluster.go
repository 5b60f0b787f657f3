package opsview

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/batonlock/baton/internal/opsclient"
)

// Cluster writes baton cluster's view: v as the node asked sees it, and
// the members' health from health, the leader's view when one answered.
func Cluster(w io.Writer, v, health opsclient.Cluster) {
	if v.Role == "standalone" {
		fmt.Fprintln(w, "standalone server: not a cluster node")
		return
	}
	leader := "none known"
	if v.Leader != nil {
		leader = fmt.Sprintf("%s (client %s, ops %s)", v.Leader.ID, v.Leader.Addr, v.Leader.OpsAddr)
	}
	// The grace is the leader's: a follower serves nothing, and its own
	// is none. The leader's view is asked for whenever a leader is known.
	grace := "grace remaining " + ms(health.GraceRemainingMS).String()
	switch {
	case health.Healthy == nil && v.Role != "leader":
		grace = "grace unknown (no leader answered)"
	case v.Role != "leader":
		grace += " (the leader's)"
	}
	fmt.Fprintf(w, "node %s: %s; leader %s; term %d, epoch %d, lease bound %s, %s\n",
		v.NodeID, v.Role, leader, v.Term, v.Epoch, ms(v.LeaseBoundMS), grace)
	if health.Healthy != nil && health.VotersHealthy != nil && health.FailureTolerance != nil {
		state := "healthy"
		if !*health.Healthy {
			state = "UNHEALTHY"
		}
		voters := 0
		for _, m := range health.Members {
			if m.Voter {
				voters++
			}
		}
		fmt.Fprintf(w, "cluster %s: %d of %d voters healthy; it can lose %d more\n", state, *health.VotersHealthy, voters, max(*health.FailureTolerance, 0))
	} else {
		fmt.Fprintln(w, "member health unknown: no leader answered")
	}
	// Said only when they do not: the usual view stays as it is.
	if health.Resumable != nil && !*health.Resumable && health.Role == "leader" {
		fmt.Fprintln(w, "claims made now do NOT survive a change of leader: a voter has not recorded that it speaks protocol version 3 (an upgrade under way, or a new cluster's first second)")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tVOTER\tROLE\tHEALTH\tFOR\tLAST CONTACT\tLOG LAG")
	for _, m := range health.Members {
		state, since, contact, lag := "unknown", "-", "-", "-"
		if h := m.Health; h != nil {
			state = "healthy"
			if !h.Healthy {
				state = "UNHEALTHY"
				if !h.Reachable {
					state = "UNREACHABLE"
				}
			}
			since = ms(h.SinceMs).Round(time.Second).String()
			switch {
			case m.Role == "leader":
				contact = "-"
			case h.LastContactMs == nil:
				contact = "never"
			default:
				contact = ms(*h.LastContactMs).String() + " ago"
			}
			lag = fmt.Sprint(h.IndexLag)
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.RaftAddr, m.Voter, m.Role, state, since, contact, lag)
	}
	tw.Flush()
}
