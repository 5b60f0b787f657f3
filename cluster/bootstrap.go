package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
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
//   - a founder that the cluster's serving leader does not know as such
//     (it never received the log: it was started late) starts without
//     bootstrapping, admits only the founders until the leader has sent it
//     the configuration, and gets the log. Only the leader's answer counts
//     for that: another founder may lag and not know yet;
//   - a founder bootstraps once a majority of the founders, itself
//     included, has answered and none knows of an epoch (no state, or
//     nothing but the founders' configuration: being founded a moment
//     ago);
//   - otherwise (a founder that knows of an epoch, no leader answering)
//     it waits.
//
// Its limit: a founder that never received an epoch (down since the
// cluster was founded) cannot tell that the others committed some; if it
// is the only founder a wiped founder can reach, with the rest down, the
// two could found the cluster again.
//
// A node answers from what it keeps on disk (the cluster id and the
// members that hold the log, written as they are applied: marker), since
// a restarted node's state machine learns the log only once a leader says
// what is committed.
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
	// Leader says that the answering node serves as the cluster's leader:
	// its state machine has every committed entry, so its "not joined" is
	// the cluster's.
	Leader bool `json:"leader,omitempty"`
	// Member says whether the asking node is in the answering node's
	// configuration now (absent from a node that has none): a removed
	// node learns of its removal from it (removed.go).
	Member *bool `json:"member,omitempty"`
}

// maxHelloLine bounds a hello's question.
const maxHelloLine = 1024

// helloTimeout bounds one hello, and helloEvery is how often the founders
// are asked again while no decision can be made.
const (
	helloTimeout = 2 * time.Second
	// Short, so that a founder started first, which found nobody yet, asks
	// again before the others have founded the cluster without it.
	helloEvery = 250 * time.Millisecond
)

// helloAnswerer answers hellos for this node; nil answers "no state".
type helloAnswerer func(asker string) helloReply

// answerHello serves a hello that began with helloMagic on conn: it reads
// the question (rest holds what was read after the magic byte) and writes
// the answer. peer is the node the connection's certificate names ("" on
// plain TCP, where the question's own word is all there is).
func answerHello(conn net.Conn, rest []byte, peer string, answer *atomic.Pointer[helloAnswerer], self string) {
	conn.SetDeadline(time.Now().Add(helloTimeout))
	line, err := bufio.NewReader(io.LimitReader(io.MultiReader(bytesReader(rest), conn), maxHelloLine)).ReadBytes('\n')
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
		// A majority of the founders must answer before anything but a
		// refusal is decided: one founder that lags (a restarted node that
		// has not learnt what is committed yet) must not speak for the
		// others. Any founder with Raft state means the cluster exists.
		answered := 1 // this node, with no state
		var unreachable []string
		var fromLeader *helloReply
		var leaderID string
		withState := 0
		for _, p := range cfg.Peers {
			if p.ID == cfg.NodeID {
				continue
			}
			r, err := askHello(dial, p.RaftAddr, cfg.NodeID)
			switch {
			case err != nil:
				unreachable = append(unreachable, fmt.Sprintf("%s (%v)", p.ID, err))
				continue
			case r.HasState && r.Joined:
				return 0, fmt.Errorf("%w: %s, a member of cluster %s, says node %q held the log. A member that lost its data must not rejoin under its id "+
					"(its empty log could elect a leader that misses committed entries, and fencing tokens could go back). "+
					"Remove it (baton cluster remove %s), then start this node with a new -node-id, -join and an empty -data-dir, "+
					"and add it (baton cluster add NEW-ID %s)", ErrLostData, p.ID, clusterName(r.ClusterID), cfg.NodeID, cfg.NodeID, cfg.advertised())
			case r.HasState && r.Leader:
				fromLeader, leaderID = &r, p.ID
				withState++
			case r.HasState && r.ClusterID != "":
				withState++
			}
			// A founder with no state, or with nothing but the founders'
			// configuration and no epoch it knows of (on disk), counts as
			// founding: the cluster is being founded a moment ago.
			answered++
		}
		switch {
		case fromLeader != nil:
			log.Info("the cluster exists and its leader says this founder never held its log: starting without bootstrapping; the leader will send the log",
				"node", cfg.NodeID, "leader", leaderID, "cluster_id", fromLeader.ClusterID)
			return joinLate, nil
		case withState == 0 && answered >= quorum:
			return bootstrapNew, nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			log.Warn("no Raft state here: waiting for a majority of the founders to say that the cluster does not exist yet, or for its leader to say whether this node held its log",
				"node", cfg.NodeID, "answered", answered, "need", quorum, "with_state", withState, "unreachable", unreachable)
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

// helloFor is this node's answer to asker once Raft runs: from the state
// machine and the marker on disk, whichever knows more.
func (n *Node) helloFor(asker string) helloReply {
	st := n.fsm.get()
	m := n.marker()
	id := st.ClusterID
	if id == "" {
		id = m.ClusterID
	}
	joined := slices.Contains(st.Joined, asker) || slices.Contains(m.Joined, asker)
	return helloReply{Node: n.cfg.NodeID, HasState: n.r().LastIndex() > 0, ClusterID: id, Joined: joined, Leader: n.leading.Load(),
		Member: n.memberNow(asker)}
}

// clusterMarker is what a node keeps on disk of the replicated state for
// the founders' question: raft/cluster.json.
type clusterMarker struct {
	ClusterID string   `json:"cluster_id"`
	Joined    []string `json:"joined"`
}

const markerFile = "cluster.json"

// readMarker reads dir's marker; none yet is the zero marker.
func readMarker(dir string) (clusterMarker, error) {
	var m clusterMarker
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, markerFile), err)
	}
	return m, nil
}

// writeMarker replaces dir's marker durably.
func writeMarker(dir string, m clusterMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeFileDurably(dir, markerFile, append(b, '\n'))
}
