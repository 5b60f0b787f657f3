package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Bootstrapping is decided with the other founders, as etcd decides it for
// a member with an empty data directory: a node whose data directory has
// no Raft state asks the founders, over their Raft ports, whether the
// cluster already exists before it bootstraps. A member that held the log
// and lost it must not come back under its id: its empty log and its vote
// could elect a leader that misses committed entries, and fencing tokens
// would go back. So:
//
//   - a founder that a peer reports as having held the log (opJoined)
//     refuses to start, and says how to come back under a new id;
//   - a founder that a peer with state does not know as such (it never
//     received the log: it was started late) starts without bootstrapping,
//     and the leader sends it the log;
//   - a founder bootstraps only once a majority of the founders, itself
//     included, said that they have no state either, or have nothing but
//     the founders' configuration (no epoch yet: founded a moment ago).
//
// The question is one line on a Raft connection, behind a byte no Raft
// message starts with; over TLS it goes only between members, like Raft.

// helloMagic opens a hello on a Raft connection (hashicorp/raft's message
// types are small integers).
const helloMagic = 0xB7

// helloAsk and helloReply are the two lines of a hello.
type helloAsk struct {
	Node string `json:"node"`
}

type helloReply struct {
	Node      string `json:"node"`
	HasState  bool   `json:"has_state"`
	ClusterID string `json:"cluster_id,omitempty"`
	// Joined says that the asking node is recorded as holding the log.
	Joined bool `json:"joined"`
}

// helloTimeout bounds one hello, and helloEvery is how often the founders
// are asked again while no decision can be made.
const (
	helloTimeout = 2 * time.Second
	helloEvery   = time.Second
)

// helloAnswerer answers hellos for this node; nil answers "no state".
type helloAnswerer func(asker string) helloReply

// answerHello serves a hello that began with helloMagic on conn: it reads
// the question (rest holds what was read after the magic byte) and writes
// the answer. peer is the node the connection's certificate names ("" on
// plain TCP, where the question's own word is all there is).
func answerHello(conn net.Conn, rest []byte, peer string, answer *atomic.Pointer[helloAnswerer], self string) {
	conn.SetDeadline(time.Now().Add(helloTimeout))
	line, err := bufio.NewReader(io.MultiReader(bytesReader(rest), conn)).ReadBytes('\n')
	if err != nil {
		return
	}
	var ask helloAsk
	if json.Unmarshal(line, &ask) != nil || ask.Node == "" || (peer != "" && peer != ask.Node) {
		return
	}
	reply := helloReply{Node: self}
	if a := answer.Load(); a != nil {
		reply = (*a)(ask.Node)
	}
	b, _ := json.Marshal(reply)
	conn.Write(append(b, '\n'))
}

type byteSlice []byte

func (b *byteSlice) Read(p []byte) (int, error) {
	if len(*b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, *b)
	*b = (*b)[n:]
	return n, nil
}

func bytesReader(b []byte) io.Reader { s := byteSlice(b); return &s }

// askHello asks the node at addr, over dial, whether the cluster exists.
func askHello(dial func(raft.ServerAddress, time.Duration) (net.Conn, error), addr, self string) (helloReply, error) {
	conn, err := dial(raft.ServerAddress(addr), helloTimeout)
	if err != nil {
		return helloReply{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(helloTimeout))
	b, _ := json.Marshal(helloAsk{Node: self})
	if _, err := conn.Write(append([]byte{helloMagic}, append(b, '\n')...)); err != nil {
		return helloReply{}, err
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return helloReply{}, fmt.Errorf("no answer (a node of an older version, or not a member): %w", err)
	}
	var r helloReply
	if err := json.Unmarshal(line, &r); err != nil {
		return helloReply{}, fmt.Errorf("bad answer: %w", err)
	}
	return r, nil
}

// ErrLostData is the refusal of a founder that held the log and lost it.
var ErrLostData = errors.New("this node held the cluster's log and its data directory has none now")

// bootstrapDecision is what a founder with no state does.
type bootstrapDecision int

const (
	bootstrapNew bootstrapDecision = iota // a new cluster: bootstrap
	joinLate                              // the cluster exists: start, and be sent the log
)

// decideBootstrap asks the other founders until it can decide, or until
// stop is closed. It refuses (ErrLostData, wrapped with the way back) when
// a founder with state says this node held the log.
func decideBootstrap(cfg Config, log *slog.Logger, dial func(raft.ServerAddress, time.Duration) (net.Conn, error), stop <-chan struct{}) (bootstrapDecision, error) {
	quorum := len(cfg.Peers)/2 + 1
	lastLog := time.Time{}
	for {
		// Every founder is asked before deciding: one that has not applied
		// the latest record yet must not speak for the others.
		empty := 1 // this node
		var unreachable []string
		var exists *helloReply
		var existsFrom string
		for _, p := range cfg.Peers {
			if p.ID == cfg.NodeID {
				continue
			}
			r, err := askHello(dial, p.RaftAddr, cfg.NodeID)
			switch {
			case err != nil:
				unreachable = append(unreachable, fmt.Sprintf("%s (%v)", p.ID, err))
			case r.HasState && r.Joined:
				return 0, fmt.Errorf("%w: %s, a member of cluster %s, says node %q held the log. A member that lost its data must not rejoin under its id "+
					"(its empty log could elect a leader that misses committed entries, and fencing tokens could go back). "+
					"Remove it (baton cluster remove %s), then start this node with a new -node-id, -join and an empty -data-dir, "+
					"and add it (baton cluster add NEW-ID %s)", ErrLostData, p.ID, clusterName(r.ClusterID), cfg.NodeID, cfg.NodeID, cfg.RaftAddr)
			case r.HasState && r.ClusterID == "":
				// Founded a moment ago, no epoch yet: nothing was committed
				// that an empty log could lose. Bootstrap alike.
				empty++
			case r.HasState:
				exists, existsFrom = &r, p.ID
			default:
				empty++
			}
		}
		if exists != nil {
			log.Info("the cluster exists and this founder never held its log: starting without bootstrapping; the leader will send the log",
				"node", cfg.NodeID, "told_by", existsFrom, "cluster_id", exists.ClusterID)
			return joinLate, nil
		}
		if empty >= quorum {
			return bootstrapNew, nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			log.Warn("no Raft state here: waiting for a majority of the founders to say whether the cluster exists before bootstrapping",
				"node", cfg.NodeID, "without_state", empty, "need", quorum, "unreachable", unreachable)
		}
		select {
		case <-stop:
			return 0, errors.New("stopped while deciding whether to bootstrap")
		case <-time.After(helloEvery):
		}
	}
}

func clusterName(id string) string {
	if id == "" {
		return "(no epoch yet)"
	}
	return id
}

// helloFor is this node's answer to asker once Raft runs.
func (n *Node) helloFor(asker string) helloReply {
	st := n.fsm.get()
	joined := false
	for _, m := range st.Joined {
		joined = joined || m == asker
	}
	return helloReply{Node: n.cfg.NodeID, HasState: n.r().LastIndex() > 0, ClusterID: st.ClusterID, Joined: joined}
}
