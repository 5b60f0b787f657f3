package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
)

// TestWipedFounderRefusedOnRestart: a founder restarted with its
// data answers the bootstrap hello before it has heard from a leader, and
// hashicorp/raft replays no log into the FSM until it learns the commit
// index: its answer is "state, no cluster id, not joined", which
// decideBootstrap counts as "founded a moment ago". A founder that held the
// log and lost it is then not refused: it bootstraps again under its id,
// votes with an empty log, and the lagging founder it elects reuses epochs
// that were already committed: fencing tokens go back.
func TestWipedFounderRefusedOnRestart(t *testing.T) {
	addrs := loopbackAddrs(t, 3)
	var peers []Peer
	dirs := map[string]string{}
	for i, a := range addrs {
		id := fmt.Sprintf("n%d", i+1)
		peers = append(peers, Peer{ID: id, RaftAddr: a})
		dirs[id] = t.TempDir()
	}
	nodes := map[string]*Node{}
	open := func(id string) *Node {
		t.Helper()
		cfg := testConfig(id)
		cfg.Peers, cfg.DataDir = peers, dirs[id]
		for _, p := range peers {
			if p.ID == id {
				cfg.RaftAddr = p.RaftAddr
			}
		}
		cfg.Addr, cfg.OpsAddr = "127.0.0.1:1", "127.0.0.1:2"
		n, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
		n.Start(&nullServer{})
		nodes[id] = n
		return n
	}
	closeNode := func(id string) {
		if n := nodes[id]; n != nil {
			n.Close()
			delete(nodes, id)
		}
	}
	t.Cleanup(func() {
		for id := range nodes {
			closeNode(id)
		}
	})
	leading := func() *Node {
		t.Helper()
		var l *Node
		batontest.Eventually(t, settle, func() bool {
			for _, n := range nodes {
				if n.Leading() {
					l = n
					return true
				}
			}
			return false
		}, "no leader")
		return l
	}
	for _, p := range peers {
		open(p.ID)
	}
	l := leading()
	batontest.Eventually(t, settle, func() bool { return len(l.fsm.get().Joined) == 3 }, "joined %v", l.fsm.get().Joined)

	// f lags: it is stopped, and the other two commit more epochs.
	var f, w string
	for id, n := range nodes {
		if n != l && f == "" {
			f = id
		}
	}
	for id, n := range nodes {
		if n != l && id != f {
			w = id
		}
	}
	closeNode(f)
	for i := 0; i < 2; i++ {
		cur := leading()
		if err := cur.Handover(); err != nil {
			t.Fatalf("handover: %v", err)
		}
		batontest.Eventually(t, settle, func() bool {
			for _, n := range nodes {
				if n != cur && n.Leading() {
					return true
				}
			}
			return false
		}, "no new leader after handover")
	}
	high := leading().fsm.get().Epoch
	t.Logf("epochs committed by the two live founders: up to %d; %s lags, %s will lose its data", high, f, w)
	for id := range nodes {
		closeNode(id)
	}
	os.RemoveAll(dirs[w])
	os.MkdirAll(dirs[w], 0o700)

	// A restart: the lagging founder first, then the wiped one; the third
	// is still down.
	open(f)
	nw := open(w)
	// The lagging founder may know from its disk that w held the log (then
	// w is refused at once), or not (then w must wait).
	refused := false
	select {
	case err := <-nw.Failed():
		if !errors.Is(err, ErrLostData) {
			t.Fatalf("wiped founder failed otherwise: %v", err)
		}
		t.Logf("refused on the lagging founder's word: %v", err)
		refused = true
	case <-time.After(3 * time.Second):
	}
	if nw.r() != nil {
		t.Fatalf("founder %s, which held the log, started Raft with an empty data directory while only the lagging founder answered", w)
	}
	// The third founder comes back: it knows (on disk) that w held the log.
	var third string
	for _, p := range peers {
		if p.ID != f && p.ID != w {
			third = p.ID
		}
	}
	open(third)
	if refused {
		if l2 := leading(); l2.fsm.get().Epoch <= high {
			t.Errorf("epoch %d after %d was committed: fencing tokens go back", l2.fsm.get().Epoch, high)
		}
		return
	}
	select {
	case err := <-nw.Failed():
		if !errors.Is(err, ErrLostData) {
			t.Fatalf("wiped founder failed otherwise: %v", err)
		}
		t.Logf("refused as it should be: %v", err)
	case <-time.After(settle):
		t.Fatalf("founder %s, which held the log, was not refused once a founder that knows it answered", w)
	}
	l2 := leading()
	if st := l2.fsm.get(); st.Epoch <= high {
		t.Errorf("epoch %d after %d was committed: fencing tokens go back", st.Epoch, high)
	}
}
