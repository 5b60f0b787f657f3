package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// TestMeasureListCommit measures the commit of a planned handover's list
// of 100,000 claims on three nodes with the real Raft transport and the
// BoltDB log on disk, with the default timers: the time that sits on
// every listed holder's deadline at a SIGTERM. A figure for
// docs/benchmarks.md: run with BATON_MEASURE=1.
func TestMeasureListCommit(t *testing.T) {
	if os.Getenv("BATON_MEASURE") != "1" {
		t.Skip("a measurement: BATON_MEASURE=1")
	}
	addrs := loopbackAddrs(t, 3)
	var peers []Peer
	for i, a := range addrs {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: a})
	}
	var nodes []*Node
	for _, p := range peers {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.RaftAddr, cfg.Peers, cfg.DataDir = p.ID, p.RaftAddr, peers, t.TempDir()
		cfg.Addr, cfg.OpsAddr = "127.0.0.1:1", "127.0.0.1:2"
		cfg.Logger = testConfig(p.ID).Logger
		n, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		n.Start(&nullServer{})
		nodes = append(nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
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
	time.Sleep(time.Second) // past the first leader's own start
	if !l.Leading() {
		t.Fatal("the leader did not stay")
	}
	epoch := l.epoch.Load()
	list := &server.HandoverList{Epoch: epoch}
	for i := range 100000 {
		c := server.HandoverClaim{Name: fmt.Sprintf("jobs/nightly-%05d", i/4), Limit: 1, Lease: 10 * time.Second, Left: 9 * time.Second}
		if i%4 == 0 {
			c.Token = epoch<<counterBits | uint64(i+1)
		} else {
			c.Ticket = epoch<<counterBits | uint64(i+1)
		}
		list.Claims = append(list.Claims, c)
	}
	for round := range 3 {
		start := time.Now()
		cmd, err := l.recordList(epoch, list)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		bytes := 0
		for _, ch := range server.EncodeHandover(list, maxListChunk) {
			bytes += len(ch)
		}
		t.Logf("round %d: 100,000 claims (a holder and 3 waiters a name), %d entries, %d bytes: committed in %v",
			round+1, cmd.ListChunks, bytes, took.Round(time.Millisecond))
	}
}
