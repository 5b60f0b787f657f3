package ops_test

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// fakeCluster is a replicated node as the ops API sees it.
type fakeCluster struct {
	mu        sync.Mutex
	leading   bool
	leaderOps string
	members   []server.ClusterMember
	addErr    error
	// healthy, votersHealthy and tolerance: the leader's view of health.
	healthy                  *bool
	votersHealthy, tolerance int
}

func (c *fakeCluster) View() server.ClusterView {
	c.mu.Lock()
	defer c.mu.Unlock()
	role := "follower"
	if c.leading {
		role = "leader"
	}
	return server.ClusterView{NodeID: "n1", Role: role, Leader: &server.ClusterNode{ID: "n2", Addr: "h:1", OpsAddr: c.leaderOps},
		Term: 7, Epoch: 12, LeaseBound: 30 * time.Second, GraceRemaining: 1500 * time.Millisecond, Members: append([]server.ClusterMember(nil), c.members...),
		Healthy: c.healthy, VotersHealthy: c.votersHealthy, FailureTolerance: c.tolerance}
}

func (c *fakeCluster) LeaderOpsAddr() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaderOps, c.leading
}

func (c *fakeCluster) AddMember(id, addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addErr != nil {
		return c.addErr
	}
	for _, m := range c.members {
		if m.ID == id {
			return fmt.Errorf("%w: %s", server.ErrMemberExists, id)
		}
	}
	c.members = append(c.members, server.ClusterMember{ID: id, RaftAddr: addr, Voter: true})
	return nil
}

// Member: the fake has no members to prove.
func (c *fakeCluster) Member(*tls.ConnectionState) (string, error) {
	return "", errors.New("fake cluster: no member certificates")
}

func (c *fakeCluster) RemoveMember(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.ID == id {
			c.members = append(c.members[:i], c.members[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("%w: %q", server.ErrNotMember, id)
}

func TestClusterStandalone(t *testing.T) {
	srv, _ := setup(t, ops.Config{})
	m := object(t, do(t, srv, "GET", "/v1/cluster", "", ""))
	if m["role"] != "standalone" || m["node_id"] != "" || m["leader"] != nil {
		t.Fatalf("standalone /v1/cluster: got %v", m)
	}
	if r := do(t, srv, "POST", "/v1/cluster/members", "", `{"id":"n4","raft_addr":"h:4"}`); r.status != http.StatusNotFound {
		t.Fatalf("members on a standalone server: got %d, want 404", r.status)
	}
}

func TestClusterView(t *testing.T) {
	healthy := false
	c := &fakeCluster{leading: true, members: []server.ClusterMember{
		{ID: "n1", RaftAddr: "h:7", Voter: true, Role: "leader", Health: &server.MemberHealth{Reachable: true, Healthy: true, Since: 90 * time.Second}},
		{ID: "n2", RaftAddr: "h:8", Voter: true, Role: "follower", Health: &server.MemberHealth{LastContact: 3500 * time.Millisecond, Failures: 17, IndexLag: 4, Since: 2 * time.Second}},
		{ID: "n3", RaftAddr: "h:9", Voter: true, Role: "follower", Health: &server.MemberHealth{LastContact: -1, Since: time.Second}},
	}, healthy: &healthy, votersHealthy: 1, tolerance: -1}
	srv, _ := setup(t, ops.Config{Cluster: c})
	m := object(t, do(t, srv, "GET", "/v1/cluster", "", ""))
	want := map[string]string{"node_id": "n1", "role": "leader", "term": "7", "epoch": "12", "lease_bound_ms": "30000", "grace_remaining_ms": "1500"}
	for k, v := range want {
		if got := fmt.Sprint(m[k]); got != v {
			t.Errorf("%s: got %s, want %s", k, got, v)
		}
	}
	if got := fmt.Sprint(m["members"]); got != "[map[health:map[failures:0 healthy:true index_lag:0 last_contact_ms:0 reachable:true since_ms:90000] id:n1 raft_addr:h:7 role:leader voter:true] "+
		"map[health:map[failures:17 healthy:false index_lag:4 last_contact_ms:3500 reachable:false since_ms:2000] id:n2 raft_addr:h:8 role:follower voter:true] "+
		"map[health:map[failures:0 healthy:false index_lag:0 last_contact_ms:<nil> reachable:false since_ms:1000] id:n3 raft_addr:h:9 role:follower voter:true]]" {
		t.Errorf("members: got %s", got)
	}
	for k, v := range map[string]string{"healthy": "false", "voters_healthy": "1", "failure_tolerance": "-1"} {
		if got := fmt.Sprint(m[k]); got != v {
			t.Errorf("%s: got %s, want %s", k, got, v)
		}
	}
	if got := fmt.Sprint(m["leader"]); got != "map[addr:h:1 id:n2 ops_addr:]" {
		t.Errorf("leader: got %s", got)
	}
}

func TestClusterMembers(t *testing.T) {
	c := &fakeCluster{leading: true, members: []server.ClusterMember{{ID: "n1", RaftAddr: "h:1", Voter: true}}}
	srv, _ := setup(t, ops.Config{Cluster: c, AdminToken: "s3cret"})
	const auth = "Bearer s3cret"
	if r := do(t, srv, "POST", "/v1/cluster/members", "", `{"id":"n4","raft_addr":"h:4"}`); r.status != http.StatusUnauthorized {
		t.Fatalf("add without the token: got %d, want 401", r.status)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/cluster/members", `{"id":"n4","raft_addr":"h:4"}`, 200},
		{"POST", "/v1/cluster/members", `{"id":"n4","raft_addr":"h:5"}`, 409},
		{"POST", "/v1/cluster/members", `{"id":"n5"}`, 400},
		{"POST", "/v1/cluster/members", `{"id":"n5","raft_addr":"h:5","x":1}`, 400},
		{"POST", "/v1/cluster/members", `not json`, 400},
		{"GET", "/v1/cluster/members", ``, 405},
		{"DELETE", "/v1/cluster/members/n9", ``, 404},
		{"DELETE", "/v1/cluster/members/n4", ``, 200},
		{"DELETE", "/v1/cluster/nope", ``, 404},
	} {
		if r := do(t, srv, tc.method, tc.path, auth, tc.body); r.status != tc.want {
			t.Errorf("%s %s %s: got %d %s, want %d", tc.method, tc.path, tc.body, r.status, r.body, tc.want)
		}
	}
	c.addErr = fmt.Errorf("raft: %w", server.ErrNotLeader)
	if r := do(t, srv, "POST", "/v1/cluster/members", auth, `{"id":"n6","raft_addr":"h:6"}`); r.status != http.StatusServiceUnavailable {
		t.Errorf("add after losing leadership: got %d, want 503", r.status)
	}
}

// TestFollowerProxies: a follower sends /v1/ lock requests and membership
// changes on to the leader's ops API, with the Authorization header, and
// answers 503 with no leader known; /v1/cluster it answers itself.
func TestFollowerProxies(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.EscapedPath()+" "+r.Header.Get("Authorization")+" "+r.Header.Get("X-Baton-Forwarded-By"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"locks":[]}`))
	}))
	defer leader.Close()
	c := &fakeCluster{leaderOps: strings.TrimPrefix(leader.URL, "http://")}
	srv, _ := setup(t, ops.Config{Cluster: c, AdminToken: "s3cret", NodeID: "n1"})
	const auth = "Bearer s3cret"
	if r := do(t, srv, "GET", "/v1/locks", "", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("without the token the follower answers 401 itself: got %d", r.status)
	}
	for _, p := range []string{"/v1/locks", "/v1/locks/a%2Fb/release", "/v1/cluster/members"} {
		method := "GET"
		if p != "/v1/locks" {
			method = "POST"
		}
		if r := do(t, srv, method, p, auth, ""); r.status != 200 || string(r.body) != `{"locks":[]}` {
			t.Errorf("%s %s via the follower: got %d %s", method, p, r.status, r.body)
		}
	}
	mu.Lock()
	want := []string{"GET /v1/locks Bearer s3cret n1", "POST /v1/locks/a%2Fb/release Bearer s3cret n1", "POST /v1/cluster/members Bearer s3cret n1"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("the leader saw %q, want %q", seen, want)
	}
	mu.Unlock()
	// A request another follower already sent on is not sent on again.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/locks", nil)
	req.Header.Set("Authorization", auth)
	req.Header.Set("X-Baton-Forwarded-By", "n3")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a second hop: got %d, want 503", resp.StatusCode)
	}
	if m := object(t, do(t, srv, "GET", "/v1/cluster", auth, "")); m["role"] != "follower" {
		t.Errorf("/v1/cluster on a follower: got %v", m)
	}
	c.mu.Lock()
	c.leaderOps = ""
	c.mu.Unlock()
	if r := do(t, srv, "GET", "/v1/locks", auth, ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("no leader known: got %d, want 503", r.status)
	}
}

// TestFollowerDashboard: the dashboard opened on a follower's ops port
// works: its login cookie and CSRF token are the follower's, and the
// follower sends the event stream and the admin actions on to the real
// leader with the admin token, the stream flushed event by event. An
// event id from another run (the leader before a failover) gets a resync.
func TestFollowerDashboard(t *testing.T) {
	const token = "s3cret"
	ts, leader := startEvents(t, ops.Config{AdminToken: token}, nil)
	c := &fakeCluster{leaderOps: strings.TrimPrefix(leader.URL, "http://")}
	follower, _ := setup(t, ops.Config{Cluster: c, AdminToken: token, NodeID: "n1"})
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	same := http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {follower.URL}}
	code, body, _ := send(t, browser, "POST", follower.URL+"/ui/login", `{"token":"`+token+`"}`, same)
	if code != 200 {
		t.Fatalf("login on the follower: %d %s", code, body)
	}
	var sess struct {
		CSRF string `json:"csrf"`
	}
	json.Unmarshal([]byte(body), &sess)
	u, _ := url.Parse(follower.URL)
	cookie := jar.Cookies(u)
	if len(cookie) != 1 || sess.CSRF == "" {
		t.Fatalf("login: cookies %v, csrf %q", cookie, sess.CSRF)
	}
	hd := http.Header{"Cookie": {cookie[0].String()}, "Sec-Fetch-Site": {"same-origin"}, "Origin": {follower.URL}}

	holder := holdLock(t, ts, "job")
	s := openStream(t, follower.URL+"/v1/events?snapshot=1", hd)
	snap := s.next(t)
	if snap.Type != "snapshot" || !strings.Contains(snap.Data, `"name":"job"`) {
		t.Fatalf("first event through the follower: %+v, want the leader's snapshot with job", snap)
	}
	second := batontest.Dial(t, ts.Addr)
	second.Acquire("job", time.Minute, false, "second")
	if e := s.expect(t, "queued", "job"); e.Session.Owner != "second" {
		t.Fatalf("queued event through the follower: %+v", e)
	}

	// The admin action with the follower's CSRF token reaches the leader;
	// without the token it is refused by the follower.
	if code, body, _ := send(t, browser, "POST", follower.URL+"/v1/locks/job/release", "", same); code != 403 {
		t.Fatalf("release through the follower without the CSRF header: %d %s, want 403", code, body)
	}
	withCSRF := http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {follower.URL}, "X-Baton-Csrf": {sess.CSRF}}
	if code, body, _ := send(t, browser, "POST", follower.URL+"/v1/locks/job/release", "", withCSRF); code != 200 {
		t.Fatalf("release through the follower: %d %s", code, body)
	}
	if f := holder.ReadFrame(5 * time.Second); f.Type != wire.TypeError {
		t.Fatalf("holder got %v, want ERROR FORCE_RELEASED", f)
	}
	s.expect(t, "force_released", "job")
	s.expect(t, "granted", "job")

	// Resuming with an id of this leader goes on; with another run's id
	// (the old leader's, after a failover) it is a resync, not a hole.
	resume := openStream(t, follower.URL+"/v1/events", http.Header{"Cookie": hd["Cookie"], "Last-Event-Id": {s.lastID(t)}})
	second.Conn.Close()
	resume.expect(t, "released", "job")
	other := openStream(t, follower.URL+"/v1/events", http.Header{"Cookie": hd["Cookie"], "Last-Event-Id": {"0badc0de-1"}})
	if rs := other.expect(t, "resync", ""); rs.Seq == 0 {
		t.Fatalf("resync %+v", rs)
	}

	// Another node leads now: the follower ends the streams it sends on
	// to the old leader (which may live on), and the reconnection reaches
	// the new one, with a resync (its numbering is its own).
	ts2, leader2 := startEvents(t, ops.Config{AdminToken: token}, nil)
	holdLock(t, ts2, "on-the-new-leader")
	c.mu.Lock()
	c.leaderOps = strings.TrimPrefix(leader2.URL, "http://")
	c.mu.Unlock()
	select {
	case <-resume.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream sent on to the old leader did not end after the leader changed")
	}
	next := openStream(t, follower.URL+"/v1/events", http.Header{"Cookie": hd["Cookie"], "Last-Event-Id": {resume.lastID(t)}})
	if rs := next.expect(t, "resync", ""); len(rs.Locks) != 1 || rs.Locks[0].Name != "on-the-new-leader" {
		t.Fatalf("resync from the new leader: %+v", rs)
	}
}

// TestLeaderEndsStreamsWhenItStopsLeading: a node's own event streams end
// when it no longer leads, so that their clients reconnect to the leader.
func TestLeaderEndsStreamsWhenItStopsLeading(t *testing.T) {
	c := &fakeCluster{leading: true, leaderOps: "self"}
	_, hs := startEvents(t, ops.Config{Cluster: c}, nil)
	s := openStream(t, hs.URL+"/v1/events?snapshot=1", nil)
	s.expect(t, "snapshot", "")
	c.mu.Lock()
	c.leading, c.leaderOps = false, ""
	c.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream of a node that stopped leading did not end")
	}
}
