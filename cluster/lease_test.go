package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/clients/go/clock"
)

// voters is a configuration of voters ids (and nonvoters non).
func voters(ids []string, non ...string) func() raft.Configuration {
	var c raft.Configuration
	for _, id := range ids {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
	}
	for _, id := range non {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Nonvoter})
	}
	return func() raft.Configuration { return c }
}

// TestLeaderLeaseQuorum: the lease runs timeout after the latest send that
// a quorum of voters (this node included) acknowledged; nonvoters do not
// count, and nothing holds before a quorum has acknowledged anything.
func TestLeaderLeaseQuorum(t *testing.T) {
	const timeout = 200 * time.Millisecond
	ms := func(n int) int64 { return int64(time.Duration(n) * time.Millisecond) }
	at := func(l *leaderLease, n int) time.Time { return l.base.Add(time.Duration(n) * time.Millisecond) }

	l := newLeaderLease("n1", timeout, clock.Now)
	l.setConfig(voters([]string{"n1", "n2", "n3", "n4", "n5"}, "n6"))
	if l.valid(at(l, 0)) {
		t.Fatal("valid before any acknowledgement")
	}
	l.ack("n6", ms(1000), 0) // a nonvoter
	l.ack("n2", ms(1000), 0)
	if l.valid(at(l, 1000)) {
		t.Fatal("valid with one of the two other acknowledgements a quorum of five needs")
	}
	l.ack("n3", ms(900), 0)
	if !l.valid(at(l, 1099)) || l.valid(at(l, 1100)) {
		t.Fatalf("two acknowledgements at 1000 and 900 ms: want valid until 900+200 ms, got until %v", time.Duration(l.until.Load()))
	}
	l.ack("n4", ms(1050), 0) // the second latest is now 1000
	if !l.valid(at(l, 1199)) || l.valid(at(l, 1200)) {
		t.Fatalf("acknowledgements 1050, 1000, 900: want valid until 1200 ms, got until %v", time.Duration(l.until.Load()))
	}
	// A pause: no acknowledgement for longer than the timeout.
	if l.valid(at(l, 5000)) {
		t.Fatal("valid 3.8 s after the last quorum-acknowledged send")
	}
	if got := l.remaining(at(l, 1150)); got != 50*time.Millisecond {
		t.Fatalf("remaining at 1150 ms: %v, want 50ms", got)
	}

	one := newLeaderLease("n1", timeout, clock.Now)
	one.setConfig(voters([]string{"n1"}))
	one.ack("n1", 1, 0) // any recompute
	if !one.valid(at(one, 1e6)) {
		t.Fatal("a one-voter cluster: nobody else can lead, the lease always holds")
	}
}

// slowTransport answers AppendEntries after delay, in term.
type slowTransport struct {
	raft.Transport
	delay time.Duration
	term  uint64
}

func (s *slowTransport) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	time.Sleep(s.delay)
	resp.Term, resp.LastLog = s.term, 7
	return nil
}

// TestLeaseAnchoredAtSend: an acknowledgement counts from when the request
// was sent, not from when its reply arrived (a reply that took long says
// nothing of the time in between), and a reply from a later term is no
// acknowledgement at all.
func TestLeaseAnchoredAtSend(t *testing.T) {
	const timeout, delay = 200 * time.Millisecond, 150 * time.Millisecond
	l := newLeaderLease("n1", timeout, clock.Now)
	l.setConfig(voters([]string{"n1", "n2", "n3"}))
	inner := &slowTransport{delay: delay, term: 5}
	lt := &leaseTransport{Transport: inner, lease: l}
	var resp raft.AppendEntriesResponse
	if err := lt.AppendEntries("n2", "n2", &raft.AppendEntriesRequest{Term: 5}, &resp); err != nil {
		t.Fatal(err)
	}
	arrived := l.now()
	if !l.holdsLog("n2", 7) || l.holdsLog("n2", 8) {
		t.Fatal("the peer's last log index was not recorded from its reply")
	}
	// Sent at least delay before arrival: valid until at most
	// arrival - delay + timeout = arrival + 50 ms.
	if l.valid(arrived.Add(timeout - delay + 20*time.Millisecond)) {
		t.Fatalf("lease valid %v after the reply arrived: it counts from the reply, not from the send", timeout-delay+20*time.Millisecond)
	}
	stale := newLeaderLease("n1", timeout, clock.Now)
	stale.setConfig(voters([]string{"n1", "n2", "n3"}))
	lt = &leaseTransport{Transport: &slowTransport{term: 6}, lease: stale}
	lt.AppendEntries("n2", "n2", &raft.AppendEntriesRequest{Term: 5}, &resp)
	if stale.valid(stale.now()) {
		t.Fatal("a reply from a later term acknowledged the send")
	}
}
