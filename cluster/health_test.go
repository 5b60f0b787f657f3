package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/internal/batontest"
)

// healthOf is member id's health in the leader's view, nil if not known.
func healthOf(l *testNode, id string) *MemberHealth {
	for _, h := range l.node.Health() {
		if string(h.ID) == id {
			return &h
		}
	}
	return nil
}

// TestMemberHealthCutAndBack: a member cut off from the leader turns
// unreachable and unhealthy in the leader's view within a few seconds,
// with its last contact growing; reconnected, it is healthy again, with
// Since counting from its return. A follower knows no member's health.
func TestMemberHealthCutAndBack(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	f := c.other(l)
	batontest.Eventually(t, settle, func() bool { h := healthOf(l, f.id); return h != nil && h.Healthy && h.Reachable }, "%s healthy at first", f.id)
	if f.node.Health() != nil {
		t.Fatal("a follower reports member health")
	}
	f.trans.DisconnectAll()
	l.trans.Disconnect(raft.ServerAddress(f.id))
	cut := time.Now()
	batontest.Eventually(t, settle, func() bool { h := healthOf(l, f.id); return h != nil && !h.Reachable && !h.Healthy }, "%s unreachable after the cut", f.id)
	h := healthOf(l, f.id)
	if h.LastContact < time.Second || h.LastContact > time.Since(cut)+time.Second {
		t.Errorf("last contact %v after a cut %v ago", h.LastContact, time.Since(cut))
	}
	v := l.node.View()
	if v.Healthy == nil || *v.Healthy || v.VotersHealthy != 2 || v.FailureTolerance != 0 {
		t.Fatalf("cluster view healthy=%v voters healthy %d tolerance %d, want false, 2, 0", v.Healthy, v.VotersHealthy, v.FailureTolerance)
	}
	c.connectAll()
	back := time.Now()
	batontest.Eventually(t, settle, func() bool { h := healthOf(l, f.id); return h != nil && h.Healthy }, "%s healthy again", f.id)
	if h := healthOf(l, f.id); h.Since > time.Since(back)+2*time.Second {
		t.Errorf("healthy for %v, but it came back %v ago", h.Since, time.Since(back))
	}
}
