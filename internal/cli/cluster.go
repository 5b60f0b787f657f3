package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/batonlock/baton/internal/opsclient"
)

// opsCluster is GET /v1/cluster (docs/operations.md, CLUSTER).
type opsCluster struct {
	NodeID string `json:"node_id"`
	Role   string `json:"role"`
	Leader *struct {
		ID      string `json:"id"`
		Addr    string `json:"addr"`
		OpsAddr string `json:"ops_addr"`
	} `json:"leader"`
	Term             uint64             `json:"term"`
	Epoch            uint64             `json:"epoch"`
	LeaseBoundMS     int64              `json:"lease_bound_ms"`
	GraceRemainingMS int64              `json:"grace_remaining_ms"`
	Resumable        *bool              `json:"resumable"`
	Members          []opsClusterMember `json:"members"`
	Healthy          *bool              `json:"healthy"`
	VotersHealthy    *int               `json:"voters_healthy"`
	FailureTolerance *int               `json:"failure_tolerance"`
}

// opsClusterMember is one member of CLUSTER.
type opsClusterMember struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Voter    bool   `json:"voter"`
	Role     string `json:"role"`
	Health   *struct {
		Reachable     bool   `json:"reachable"`
		LastContactMs *int64 `json:"last_contact_ms"`
		Failures      uint64 `json:"failures"`
		IndexLag      uint64 `json:"index_lag"`
		Healthy       bool   `json:"healthy"`
		SinceMs       int64  `json:"since_ms"`
	} `json:"health"`
}

func clusterCommand() *command {
	return &command{
		name:    "cluster",
		summary: "show a replicated cluster, add or remove a member",
		usage:   "baton cluster [flags] [add ID RAFT-HOST:PORT | remove ID]",
		flags:   func() *flag.FlagSet { return newAdminFlags("cluster", new(adminOptions)) },
		help: `Without arguments, the cluster as the node at -ops-addr sees it: its role,
the leader, the term and epoch, the lease bound and the grace remaining, then
one line per member. 'add' makes a node a voting member (start it first with
-join and an empty -data-dir); 'remove' takes a member out (a dead node, or
one to retire). Both go to the leader, from any node.

To replace a dead node n3: 'baton cluster remove n3', then start the new node
with a new -node-id (say n4), an empty -data-dir, -join and the -peers of the
founders, then 'baton cluster add n4 HOST:RAFTPORT' (docs/operations.md).
` + adminHelp + `
Examples:
  baton cluster -ops-addr 127.0.0.1:7171
  baton cluster add n4 10.0.0.4:7072
  baton cluster remove n3
`,
		run: runCluster,
	}
}

func runCluster(ctx context.Context, s *sys, c *command, args []string) int {
	var o adminOptions
	fs := newAdminFlags(c.name, &o)
	pos, code, ok := parseInterspersed(s, c, fs, args)
	if !ok {
		return code
	}
	var method, path string
	var body []byte
	switch {
	case len(pos) == 0:
		method, path = http.MethodGet, "/v1/cluster"
	case pos[0] == "add" && len(pos) == 3:
		if pos[1] == "" {
			return usageError(s, c.name, "member id is empty")
		}
		if _, port, err := net.SplitHostPort(pos[2]); err != nil || port == "" {
			return usageError(s, c.name, fmt.Sprintf("raft address %q is not host:port", pos[2]))
		}
		method, path = http.MethodPost, "/v1/cluster/members"
		body, _ = json.Marshal(map[string]string{"id": pos[1], "raft_addr": pos[2]})
	case pos[0] == "remove" && len(pos) == 2:
		if pos[1] == "" {
			return usageError(s, c.name, "member id is empty")
		}
		method, path = http.MethodDelete, "/v1/cluster/members/"+url.PathEscape(pos[1])
	case pos[0] == "add":
		return usageError(s, c.name, "add needs ID and RAFT-HOST:PORT")
	case pos[0] == "remove":
		return usageError(s, c.name, "remove needs ID")
	default:
		return usageError(s, c.name, fmt.Sprintf("unknown argument %q: give nothing, add or remove", pos[0]))
	}
	if err := opsclient.CheckAddrs(o.opsAddr); err != nil {
		return usageError(s, c.name, err.Error())
	}
	if err := o.tls.check(); err != nil {
		return usageError(s, c.name, err.Error())
	}
	token, err := adminToken(s, o.adminTokenFile)
	if err != nil {
		return failure(s, c.name, err.Error())
	}
	tlsCfg, err := o.tls.config()
	if err != nil {
		return failure(s, c.name, err.Error())
	}
	ops := opsclient.New(o.opsAddr, token, tlsCfg)
	answer, err := ops.Send(ctx, method, path, body)
	if err != nil {
		return adminFailed(s, c.name, err)
	}
	if o.json {
		s.stdout.Write(answer)
		if len(answer) > 0 && answer[len(answer)-1] != '\n' {
			fmt.Fprintln(s.stdout)
		}
		return exitOK
	}
	var v opsCluster
	if err := json.Unmarshal(answer, &v); err != nil {
		return failure(s, c.name, fmt.Sprintf("unexpected answer from %s: %v", o.opsAddr, err))
	}
	switch {
	case len(pos) > 0 && pos[0] == "add":
		fmt.Fprintf(s.stdout, "added %s at %s: the cluster has %d members\n", pos[1], pos[2], len(v.Members))
	case len(pos) > 0:
		fmt.Fprintf(s.stdout, "removed %s: the cluster has %d members\n", pos[1], len(v.Members))
	}
	// Only the leader knows its members' health: a follower sends the
	// question on.
	health := v
	if v.Role != "leader" && v.Role != "standalone" && v.Leader != nil {
		if b, err := ops.Send(ctx, http.MethodGet, "/v1/cluster?view=leader", nil); err == nil {
			var lv opsCluster
			if json.Unmarshal(b, &lv) == nil && lv.Healthy != nil {
				health = lv
			}
		}
	}
	if len(pos) > 0 && pos[0] == "add" {
		health = awaitNewMember(ctx, ops, pos[1], health)
		warnSilentMember(s, pos[1], pos[2], health)
	}
	printCluster(s, v, health)
	return exitOK
}

// newMemberWait is how long baton cluster add waits for the new member's
// first answer to the leader before it says that none came.
const newMemberWait = 5 * time.Second

// awaitNewMember asks the leader's view until member id has answered the
// leader, for at most newMemberWait, and returns the last view.
func awaitNewMember(ctx context.Context, ops *opsclient.Client, id string, last opsCluster) opsCluster {
	deadline := time.Now().Add(newMemberWait)
	for {
		if m := memberOf(last, id); m != nil && m.Health != nil && m.Health.LastContactMs != nil {
			return last
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(250 * time.Millisecond):
		}
		if b, err := ops.Send(ctx, http.MethodGet, "/v1/cluster?view=leader", nil); err == nil {
			var lv opsCluster
			if json.Unmarshal(b, &lv) == nil && lv.Healthy != nil {
				last = lv
			}
		}
	}
}

// warnSilentMember says, after an add, that the new member has not
// answered the leader: nothing listens at its address yet, or it is not
// a baton serve -join of this cluster. The cluster then counts it
// unhealthy, and a majority needs it.
func warnSilentMember(s *sys, id, raftAddr string, health opsCluster) {
	m := memberOf(health, id)
	if m != nil && m.Health != nil && m.Health.LastContactMs != nil {
		return
	}
	fmt.Fprintf(s.stderr, "baton cluster: warning: %s at %s has not answered the leader within %v: start it there with baton serve -join "+
		"(and this cluster's -peers), or remove it (baton cluster remove %s); until it answers it counts against the quorum\n",
		id, raftAddr, newMemberWait, id)
}

// memberOf is member id of v, or nil.
func memberOf(v opsCluster, id string) *opsClusterMember {
	for i := range v.Members {
		if v.Members[i].ID == id {
			return &v.Members[i]
		}
	}
	return nil
}

func printCluster(s *sys, v, health opsCluster) {
	if v.Role == "standalone" {
		fmt.Fprintln(s.stdout, "standalone server: not a cluster node")
		return
	}
	leader := "none known"
	if v.Leader != nil {
		leader = fmt.Sprintf("%s (client %s, ops %s)", v.Leader.ID, v.Leader.Addr, v.Leader.OpsAddr)
	}
	// The grace is the leader's: a follower serves nothing, and its own
	// is none. The leader's view is asked for whenever a leader is known.
	grace := "grace remaining " + msDuration(health.GraceRemainingMS).String()
	switch {
	case health.Healthy == nil && v.Role != "leader":
		grace = "grace unknown (no leader answered)"
	case v.Role != "leader":
		grace += " (the leader's)"
	}
	fmt.Fprintf(s.stdout, "node %s: %s; leader %s; term %d, epoch %d, lease bound %s, %s\n",
		v.NodeID, v.Role, leader, v.Term, v.Epoch, msDuration(v.LeaseBoundMS), grace)
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
		fmt.Fprintf(s.stdout, "cluster %s: %d of %d voters healthy; it can lose %d more\n", state, *health.VotersHealthy, voters, max(*health.FailureTolerance, 0))
	} else {
		fmt.Fprintln(s.stdout, "member health unknown: no leader answered")
	}
	if health.Resumable != nil && health.Role == "leader" {
		if *health.Resumable {
			fmt.Fprintln(s.stdout, "claims of protocol version 3 survive a change of leader")
		} else {
			fmt.Fprintln(s.stdout, "claims made now do NOT survive a change of leader: a voter has not recorded that it speaks protocol version 3 (an upgrade under way, or a new cluster's first second)")
		}
	}
	tw := tabwriter.NewWriter(s.stdout, 0, 4, 2, ' ', 0)
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
			since = msDuration(h.SinceMs).Round(time.Second).String()
			switch {
			case m.Role == "leader":
				contact = "-"
			case h.LastContactMs == nil:
				contact = "never"
			default:
				contact = msDuration(*h.LastContactMs).String() + " ago"
			}
			lag = fmt.Sprint(h.IndexLag)
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.RaftAddr, m.Voter, m.Role, state, since, contact, lag)
	}
	tw.Flush()
}
