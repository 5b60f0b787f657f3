package ops_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// viewCluster is fakeCluster with a view of the test's choosing.
type viewCluster struct {
	*fakeCluster
	view server.ClusterView
}

func (c *viewCluster) View() server.ClusterView { return c.view }

// stoppingBackend is fakeBackend that can be shutting down.
type stoppingBackend struct {
	*fakeBackend
	down atomic.Bool
}

func (b *stoppingBackend) ShuttingDown() bool { return b.down.Load() }

// TestReadyzMember: /readyz?member is 200 on the leader (as /readyz) and on
// a voter that knows the leader, and 503, saying why, on a node with no
// leader known, a candidate, a non-voter, a node outside the membership,
// a node shutting down, and a standalone server that does not serve.
// /readyz alone stays the leader's.
func TestReadyzMember(t *testing.T) {
	leader := &server.ClusterNode{ID: "n2", Addr: "h:1", OpsAddr: "h:2"}
	members := []server.ClusterMember{{ID: "n1", Voter: true}, {ID: "n2", Voter: true}, {ID: "n3", Voter: true}}
	follower := server.ClusterView{NodeID: "n1", Role: "follower", Leader: leader, Members: members}
	for _, tc := range []struct {
		name        string
		view        *server.ClusterView // nil: standalone
		ready, down bool
		want        int
		body        string
	}{
		{"standalone serving", nil, true, false, 200, "ready\n"},
		{"standalone not serving", nil, false, false, 503, "not ready: not accepting new sessions\n"},
		{"leader", &server.ClusterView{NodeID: "n2", Role: "leader", Leader: leader, Members: members}, true, false, 200, "ready\n"},
		{"follower with a leader", &follower, false, false, 200, "ready: a member following the leader\n"},
		{"follower with no leader known", &server.ClusterView{NodeID: "n1", Role: "follower", Members: members}, false, false, 503, "not ready: no leader known\n"},
		{"candidate", &server.ClusterView{NodeID: "n1", Role: "candidate", Leader: leader, Members: members}, false, false, 503, "not ready: a candidate\n"},
		{"non-voter", &server.ClusterView{NodeID: "n1", Role: "follower", Leader: leader, Members: []server.ClusterMember{{ID: "n1"}, {ID: "n2", Voter: true}}}, false, false, 503, "not ready: not a voter\n"},
		{"not a member", &server.ClusterView{NodeID: "n9", Role: "follower", Leader: leader, Members: members}, false, false, 503, "not ready: not a member\n"},
		{"follower shutting down", &follower, false, true, 503, "not ready: shutting down\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &stoppingBackend{fakeBackend: newFake()}
			b.setReady(tc.ready)
			b.down.Store(tc.down)
			cfg := ops.Config{Backend: b}
			if tc.view != nil {
				cfg.Cluster = &viewCluster{fakeCluster: &fakeCluster{}, view: *tc.view}
			}
			srv, _ := setup(t, cfg)
			r := do(t, srv, "GET", "/readyz?member", "", "")
			if r.status != tc.want || string(r.body) != tc.body {
				t.Errorf("/readyz?member: got %d %q, want %d %q", r.status, r.body, tc.want, tc.body)
			}
			plain := do(t, srv, "GET", "/readyz", "", "")
			if want := map[bool]int{true: 200, false: 503}[tc.ready]; plain.status != want {
				t.Errorf("/readyz: got %d, want %d (the leader's alone)", plain.status, want)
			}
			if strings.Contains(string(plain.body), "member") {
				t.Errorf("/readyz answers %q: only ?member asks about membership", plain.body)
			}
		})
	}
}
