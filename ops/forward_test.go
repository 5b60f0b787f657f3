package ops_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// memberCluster is a fake node whose members are proved by node
// certificates (baton://node/<id>) of one CA.
type memberCluster struct {
	*fakeCluster
	members []string
}

func (c *memberCluster) Member(cs *tls.ConnectionState) (string, error) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return "", errors.New("no certificate")
	}
	for _, u := range cs.PeerCertificates[0].URIs {
		if id := strings.TrimPrefix(u.Path, "/"); u.Scheme == "baton" && slices.Contains(c.members, id) {
			return id, nil
		}
	}
	return "", errors.New("not a member")
}

// adminRules: operator may do anything, scoped may force-release jobs/...
// only, worker may only acquire.
func adminRules(t *testing.T) *server.ACL {
	t.Helper()
	acl, err := server.ParseACL([]byte(`{"rules": [
		{"clients": ["operator"], "locks": [""], "admin": [""]},
		{"clients": ["scoped"], "admin": ["jobs"]},
		{"clients": ["worker"], "locks": ["jobs"]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	return acl
}

// clientCall sends one request over a fresh TLS connection presenting leaf
// (nil: none), and returns the answer and the client's local address.
func clientCall(t *testing.T, ca *testcerts.CA, leaf *testcerts.Leaf, method, url, auth, body string, header http.Header) (int, string, string) {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if leaf != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil }
	}
	var local string
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				local = c.LocalAddr().String()
			}
			return c, err
		}}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), local
}

// TestMembershipChangesNeedAdminGrant: under access rules, adding or
// removing a member needs the admin rule of force-release for every lock
// name (the prefix ""): the token and a certificate are not enough, nor
// is an admin grant of some locks.
func TestMembershipChangesNeedAdminGrant(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	c := &fakeCluster{leading: true, members: []server.ClusterMember{{ID: "n1", RaftAddr: "h:1", Voter: true}}}
	var logs syncBuffer
	acl := adminRules(t)
	o := serveTLS(t, ca, true, ops.Config{Cluster: c, AdminToken: "s3cret", RequireClientCert: true,
		ACL: func() *server.ACL { return acl }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const auth = "Bearer s3cret"
	add := `{"id": "n9", "raft_addr": "10.9.9.9:7301"}`
	for _, who := range []string{"worker", "scoped"} {
		leaf := ca.Client(t, who)
		if code, body, _ := clientCall(t, ca, leaf, "POST", o.url+"/v1/cluster/members", auth, add, nil); code != 403 || !strings.Contains(body, "needs an admin grant of every lock") {
			t.Errorf("%s adds a member: %d %s, want 403", who, code, body)
		}
		if code, body, _ := clientCall(t, ca, leaf, "DELETE", o.url+"/v1/cluster/members/n1", auth, "", nil); code != 403 {
			t.Errorf("%s removes a member: %d %s, want 403", who, code, body)
		}
	}
	if v := c.View(); len(v.Members) != 1 || v.Members[0].ID != "n1" {
		t.Fatalf("members after refused changes: %v, want n1 alone", v.Members)
	}
	if n := strings.Count(logs.b.String(), "refused by the access rules"); n != 4 {
		t.Errorf("%d refusals logged, want 4:\n%s", n, logs.b.String())
	}
	op := ca.Client(t, "operator")
	if code, body, _ := clientCall(t, ca, op, "POST", o.url+"/v1/cluster/members", auth, add, nil); code != 200 {
		t.Errorf("operator adds a member: %d %s, want 200", code, body)
	}
	if code, body, _ := clientCall(t, ca, op, "DELETE", o.url+"/v1/cluster/members/n9", auth, "", nil); code != 200 {
		t.Errorf("operator removes a member: %d %s, want 200", code, body)
	}
	if !strings.Contains(logs.b.String(), `msg="ops: member added" id=n9 raft_addr=10.9.9.9:7301 identities=[operator]`) {
		t.Errorf("the member-added line does not name the operator:\n%s", logs.b.String())
	}
}

// forwardPair is a leader's and a follower's ops API over TLS with one CA
// for everything, as baton serve runs them: the leader's listener takes
// the forward channel's handshakes with its node certificate; the
// follower sends requests on over it with its own.
type forwardPair struct {
	ca               *testcerts.CA
	leaderURL        string
	followerURL      string
	leaderBackend    *fakeBackend
	leaderLog        *syncBuffer
	mu               sync.Mutex
	leaderSawAuth    []string // Authorization headers that reached the leader
	followerLogLines *syncBuffer
}

func newForwardPair(t *testing.T, followerNode string) *forwardPair {
	t.Helper()
	ca := testcerts.NewCA(t, "one CA")
	acl := adminRules(t)
	fp := &forwardPair{ca: ca, leaderBackend: newFake(), leaderLog: &syncBuffer{}, followerLogLines: &syncBuffer{}}
	leaderCluster := &memberCluster{fakeCluster: &fakeCluster{leading: true, leaderOps: "self"}, members: []string{"n1", "n2", "n3"}}
	leaderHandler := ops.NewHandler(ops.Config{Backend: fp.leaderBackend, Cluster: leaderCluster, NodeID: "n1",
		AdminToken: "s3cret", RequireClientCert: true, ACL: func() *server.ACL { return acl },
		Logger: slog.New(slog.NewTextHandler(fp.leaderLog, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	// The leader's listener: its own certificate and client CA, and the
	// forward channel under its protocol name.
	own := &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	forward := &tls.Config{Certificates: []tls.Certificate{ca.Node(t, "n1").TLS}, ClientAuth: tls.RequireAnyClientCert,
		NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS13}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fp.mu.Lock()
		fp.leaderSawAuth = append(fp.leaderSawAuth, r.Header.Get("Authorization"))
		fp.mu.Unlock()
		leaderHandler.ServeHTTP(w, r)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(tls.NewListener(ln, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			if slices.Contains(h.SupportedProtos, ops.ForwardProtocol) {
				return forward, nil
			}
			return own, nil
		}}))
	}()
	t.Cleanup(func() { hs.Close(); <-done })
	fp.leaderURL = "https://" + ln.Addr().String()

	node := ca.Node(t, followerNode)
	proxy := &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{node.TLS}, InsecureSkipVerify: true,
		NextProtos: []string{ops.ForwardProtocol, "http/1.1"}, MinVersion: tls.VersionTLS13}}
	t.Cleanup(proxy.CloseIdleConnections)
	follower := serveTLS(t, ca, true, ops.Config{Cluster: &fakeCluster{leaderOps: ln.Addr().String()}, NodeID: followerNode,
		ProxyTransport: proxy, ProxyTLS: true, AdminToken: "s3cret", RequireClientCert: true, ACL: func() *server.ACL { return acl },
		Logger: slog.New(slog.NewTextHandler(fp.followerLogLines, nil))})
	fp.followerURL = follower.url
	return fp
}

// TestFollowerKeepsCallersIdentity: a caller refused force-release by the
// leader is refused through a follower too; one allowed is allowed, and
// the leader's log names the caller's address. No Authorization header
// reaches the leader from the follower.
func TestFollowerKeepsCallersIdentity(t *testing.T) {
	fp := newForwardPair(t, "n2")
	const auth = "Bearer s3cret"
	worker, scoped, op := fp.ca.Client(t, "worker"), fp.ca.Client(t, "scoped"), fp.ca.Client(t, "operator")
	for _, tt := range []struct {
		who  string
		leaf *testcerts.Leaf
		path string
		want int
	}{
		{"worker", worker, "/v1/locks/jobs/release", 403},
		{"worker", worker, "/v1/sessions/2/kick", 403},
		{"scoped", scoped, "/v1/locks/solo/release", 403},
		{"no certificate", nil, "/v1/locks/jobs/release", 401}, // the follower's own rule
	} {
		for where, url := range map[string]string{"leader": fp.leaderURL, "follower": fp.followerURL} {
			if code, body, _ := clientCall(t, fp.ca, tt.leaf, "POST", url+tt.path, auth, "", nil); code != tt.want {
				t.Errorf("%s POST %s via the %s: %d %s, want %d", tt.who, tt.path, where, code, body, tt.want)
			}
		}
	}
	if l, _ := fp.leaderBackend.Lock("jobs"); l.Holder == nil || len(l.Waiters) != 2 {
		t.Fatalf("jobs on the leader after refused requests: %+v", l)
	}
	// Reads and allowed actions go through, as the caller.
	if code, body, _ := clientCall(t, fp.ca, worker, "GET", fp.followerURL+"/v1/locks", auth, "", nil); code != 200 || !strings.Contains(body, `"name":"jobs"`) {
		t.Errorf("worker reads through the follower: %d %s", code, body)
	}
	code, body, opAddr := clientCall(t, fp.ca, op, "POST", fp.followerURL+"/v1/locks/jobs/release", auth, "", nil)
	if code != 200 {
		t.Fatalf("operator force-releases through the follower: %d %s", code, body)
	}
	if code, body, _ := clientCall(t, fp.ca, scoped, "POST", fp.followerURL+"/v1/locks/jobs/release", auth, "", nil); code != 200 {
		t.Errorf("scoped force-releases jobs through the follower: %d %s", code, body)
	}
	var released string
	for _, line := range strings.Split(fp.leaderLog.b.String(), "\n") {
		if strings.Contains(line, "force-released lock") {
			released = line
			break
		}
	}
	if !strings.Contains(released, "client="+opAddr) {
		t.Errorf("the leader's force-release line does not name the operator's address %s:\n%s", opAddr, fp.leaderLog.b.String())
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	forwarded := strings.Count(fp.leaderLog.b.String(), "request forwarded by a member")
	tokens := 0
	for _, a := range fp.leaderSawAuth {
		if a != "" {
			tokens++
		}
	}
	// Direct calls: 4 (three with a certificate, one without); everything
	// else came from the follower, without the token.
	if direct := 4; tokens != direct || forwarded != len(fp.leaderSawAuth)-direct {
		t.Errorf("the leader saw %d requests with a token and %d forwarded ones of %d, want %d direct and the rest forwarded without a token",
			tokens, forwarded, len(fp.leaderSawAuth), direct)
	}
}

// TestForwardedIdentityOnlyFromMembers: the caller headers mean something
// only on the forward channel from a current member. A client that sends
// them itself, with the token and its own certificate, is still itself;
// a node certificate of a non-member gets 403 from the leader.
func TestForwardedIdentityOnlyFromMembers(t *testing.T) {
	fp := newForwardPair(t, "n9")
	op, worker := fp.ca.Client(t, "operator"), fp.ca.Client(t, "worker")
	spoof := http.Header{"X-Baton-Caller-Cert": {base64.StdEncoding.EncodeToString(op.TLS.Leaf.Raw)}, "X-Baton-Caller-Addr": {"192.0.2.7:1"}}
	if code, body, _ := clientCall(t, fp.ca, worker, "POST", fp.leaderURL+"/v1/locks/jobs/release", "Bearer s3cret", "", spoof); code != 403 || !strings.Contains(body, `identity \"worker\"`) {
		t.Errorf("worker claiming to be the operator: %d %s, want 403 as worker", code, body)
	}
	spoof.Set("X-Baton-Forwarded-By", "n2")
	if code, body, _ := clientCall(t, fp.ca, worker, "POST", fp.leaderURL+"/v1/locks/jobs/release", "Bearer s3cret", "", spoof); code != 403 || !strings.Contains(body, "not a member") {
		t.Errorf("worker claiming to be member n2 forwarding the operator: %d %s, want 403", code, body)
	}
	// The follower here is n9, no member: the leader refuses what it sends.
	if code, body, _ := clientCall(t, fp.ca, op, "GET", fp.followerURL+"/v1/locks", "Bearer s3cret", "", nil); code != 403 || !strings.Contains(body, "not a member") {
		t.Errorf("a request sent on by a non-member: %d %s, want 403", code, body)
	}
}

// TestPlainFollowerForwardsToMember: on plain HTTP a follower sends a
// request on to the leader's ops address that Cluster gives (a current
// member's), with the caller's own token and nothing else of its.
func TestPlainFollowerForwardsToMember(t *testing.T) {
	var got http.Header
	var mu sync.Mutex
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"locks":[]}`)
	}))
	defer leader.Close()
	c := &fakeCluster{leaderOps: strings.TrimPrefix(leader.URL, "http://")}
	srv, _ := setup(t, ops.Config{Cluster: c, AdminToken: "s3cret", NodeID: "n2"})
	r := do(t, srv, "GET", "/v1/locks", "Bearer s3cret", "")
	if r.status != http.StatusOK {
		t.Fatalf("plain follower: %d %s, want the leader's 200", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.Get("Authorization") != "Bearer s3cret" || got.Get("X-Baton-Forwarded-By") != "n2" {
		t.Fatalf("the leader saw Authorization %q, forwarded by %q; want the caller's token, by n2", got.Get("Authorization"), got.Get("X-Baton-Forwarded-By"))
	}
	// With no member leader known (Cluster gives no address), nothing is
	// dialed and the caller is told.
	c.leaderOps = ""
	if r := do(t, srv, "GET", "/v1/locks", "Bearer s3cret", ""); r.status != http.StatusServiceUnavailable {
		t.Fatalf("no leader known: %d %s, want 503", r.status, r.body)
	}
}
