package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/opsview"
)

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
	var v opsclient.Cluster
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
		if lv, ok := ops.LeaderView(ctx); ok {
			health = lv
		}
	}
	if len(pos) > 0 && pos[0] == "add" {
		health = ops.AwaitMember(ctx, pos[1], health, newMemberWait)
		warnSilentMember(s, pos[1], pos[2], health)
	}
	opsview.Cluster(s.stdout, v, health)
	return exitOK
}

// newMemberWait is how long baton cluster add waits for the new member's
// first answer to the leader before it says that none came.
const newMemberWait = 5 * time.Second

// warnSilentMember says, after an add, that the new member has not
// answered the leader: nothing listens at its address yet, or it is not
// a baton serve -join of this cluster. The cluster then counts it
// unhealthy, and a majority needs it.
func warnSilentMember(s *sys, id, raftAddr string, health opsclient.Cluster) {
	if health.Answered(id) {
		return
	}
	fmt.Fprintf(s.stderr, "baton cluster: warning: %s at %s has not answered the leader within %v: start it there with baton serve -join "+
		"(and this cluster's -peers), or remove it (baton cluster remove %s); until it answers it counts against the quorum\n",
		id, raftAddr, newMemberWait, id)
}
