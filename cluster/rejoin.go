package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// A node started with -join and no Raft state is either new (it waits to
// be added) or a member that lost its data directory, which must not come
// back under its id any more than a founder (bootstrap.go): with an empty
// log and configuration hashicorp/raft grants its vote to any candidate,
// so beside a founder that lags behind it elects a leader that misses
// committed epochs and lease bounds. So before it starts Raft it asks
// the founders' question ("did I hold the log?", answered from each
// node's state and cluster.json) of:
//
//   - the members named in its -peers (the current members, as the way to
//     add a node gives them);
//   - every node whose Raft RPC reaches it meanwhile (a leader replicating
//     to it once it has been added, or a candidate asking for its vote),
//     at the address the RPC names. Until it knows, it votes for nobody
//     and takes no entry: it holds such an RPC unanswered, and answers it
//     with an error once it has decided. (An error at once would make a
//     leader that has just added it back off, doubling its wait after
//     each, for up to ten seconds once this node has started.)
//
// It starts Raft once the cluster's serving leader says that it never
// held the log (a follower may lag and not know yet), and refuses
// (ErrLostData, with the way back) once any node with state says that it
// did. Over TLS a node that is not yet a member is not answered (only
// members speak on the Raft port): a new node is answered once it has
// been added, a member that lost its data at once.

// errJoinUndecided answers a Raft RPC that reaches a joining node before
// it knows whether it may take part.
var errJoinUndecided = errors.New("cluster: this node was asking whether it held the log before it takes part")

// decideJoin asks, for a -join node with no Raft state, until the
// cluster's leader says it never held the log (nil), a node says it did
// (ErrLostData), or stop is closed. rpcs is the transport's RPC channel,
// which no Raft reads yet.
func decideJoin(cfg Config, log *slog.Logger, dial func(raft.ServerAddress, time.Duration) (net.Conn, error), rpcs <-chan raft.RPC, stop <-chan struct{}) error {
	var addrs []string
	for _, p := range cfg.Peers {
		if p.RaftAddr != cfg.RaftAddr {
			addrs = append(addrs, p.RaftAddr)
		}
	}
	tick := time.NewTicker(helloEvery)
	defer tick.Stop()
	var held []raft.RPC
	defer func() {
		for _, rpc := range held {
			rpc.Respond(nil, errJoinUndecided)
		}
	}()
	var lastLog, lastAsked time.Time
	for {
		lastAsked = time.Now()
		var unreachable []string
		for _, a := range addrs {
			r, err := askHello(dial, a, cfg.NodeID)
			switch {
			case err != nil:
				unreachable = append(unreachable, fmt.Sprintf("%s (%v)", a, err))
			case r.HasState && r.Joined:
				return fmt.Errorf("%w: %s (at %s), a member of cluster %s, says node %q held the log. %s",
					ErrLostData, r.Node, a, clusterName(r.ClusterID), cfg.NodeID, wayBack(cfg))
			case r.HasState && r.Leader:
				log.Info("the cluster's leader says this node never held its log: starting, to be sent the log once it has been added",
					"node", cfg.NodeID, "leader", r.Node, "cluster_id", r.ClusterID)
				return nil
			}
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			log.Warn(fmt.Sprintf("waiting to be added: run baton cluster add %s %s on a member", cfg.NodeID, cfg.advertised()),
				"node", cfg.NodeID, "state", "no Raft state here: it takes part in nothing until the cluster's leader says that it never held the log",
				"asked", addrs, "unreachable", unreachable)
		}
	wait:
		for {
			select {
			case <-stop:
				return errors.New("stopped while asking whether this node held the log")
			case <-tick.C:
				break wait
			case rpc := <-rpcs:
				if len(held) < maxHeld {
					held = append(held, rpc)
				} else {
					rpc.Respond(nil, errJoinUndecided)
				}
				// The sender is asked at once, first: a leader that has
				// just added this node counts it in its quorum, and steps
				// down after one leader lease timeout (200 ms) without
				// its answer; with a member down, no leader can then be
				// elected without this node, which waits for a leader.
				a := rpcSender(rpc)
				if a == "" || a == cfg.RaftAddr {
					continue
				}
				if i := slices.Index(addrs, a); i >= 0 {
					addrs = slices.Insert(slices.Delete(addrs, i, i+1), 0, a)
				} else if len(addrs) < maxAsked {
					addrs = slices.Insert(addrs, 0, a)
				} else {
					continue
				}
				if time.Since(lastAsked) >= askAgainAfter {
					break wait
				}
			}
		}
	}
}

// maxAsked bounds the addresses a joining node asks (its peers and the
// senders of the RPCs that reach it), and maxHeld the RPCs it holds (a
// sender has one or two in flight: replication and heartbeats).
const (
	maxAsked = 16
	maxHeld  = 64
)

// askAgainAfter spaces the rounds of questions that RPCs start: a sender
// has one or two in flight, and a flood of RPCs must not become a flood
// of questions.
const askAgainAfter = 20 * time.Millisecond

// rpcSender is the Raft address an RPC names as its sender's, "" if none.
func rpcSender(rpc raft.RPC) string {
	h, ok := rpc.Command.(raft.WithRPCHeader)
	if !ok {
		return ""
	}
	return string(h.GetRPCHeader().Addr)
}
