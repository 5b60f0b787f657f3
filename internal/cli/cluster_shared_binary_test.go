package cli

import (
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// sharedClaim is a protocol v2 shared claim of name with limit.
func sharedClaim(name string, limit uint16, lease time.Duration) wire.Acquire {
	return wire.Acquire{Version: wire.Version2, Flags: wire.FlagShared, Limit: limit, LeaseMs: uint32(lease.Milliseconds()), Name: name}
}

// TestBinaryClusterSharedTokensAcrossRestart: a semaphore's holders on a
// real 3-node cluster each get their own token, rising; after kill -9 of
// every node and a restart of all, the new holders' tokens are above
// every one granted before.
func TestBinaryClusterSharedTokensAcrossRestart(t *testing.T) {
	t.Parallel()
	procs, peers := clusterLayout(t)
	for _, p := range procs {
		p.start(t, peers)
	}
	l := waitLeader(t, procs)
	var highest uint64
	for i := range 3 {
		g := readGrantedClaim(t, l.addr, sharedClaim("sem", 3, time.Second))
		if g.token <= highest {
			t.Fatalf("shared holder %d: token %#x, want above %#x", i, g.token, highest)
		}
		highest = g.token
	}
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.log.waited
		p.log.waited <- nil
	}
	for _, p := range procs {
		p.start(t, peers)
	}
	l = waitLeader(t, procs)
	for i := range 3 {
		g := readGrantedClaim(t, l.addr, sharedClaim("sem", 3, time.Second))
		if g.token <= highest {
			t.Fatalf("after kill -9 of every node and a restart: shared holder %d: token %#x, want above %#x", i, g.token, highest)
		}
		highest = g.token
	}
}
