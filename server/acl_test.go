package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

const testACL = `{"rules": [
  {"clients": ["alice"], "locks": ["jobs/", "deploy/web"]},
  {"clients": ["svc.example.org"], "locks": ["svc/"]},
  {"clients": ["spiffe://example.org/batch"], "locks": ["batch/"]},
  {"clients": ["ops@example.org"], "locks": [""], "admin": ["jobs/"]},
  {"clients": ["*"], "locks": ["shared/"]}
]}`

func mustACL(t *testing.T, text string) *server.ACL {
	t.Helper()
	a, err := server.ParseACL([]byte(text))
	if err != nil {
		t.Fatalf("ParseACL: %v", err)
	}
	return a
}

// TestACL: each ACQUIRE is allowed or refused by the identities of the
// client's verified certificate (CN, DNS, URI and email SANs); refusals
// get ERROR UNAUTHORIZED, never reach the table, and are counted.
func TestACL(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	s := startTLS(t, ca, []*testcerts.CA{ca}, func(c *server.Config) { c.ACL = mustACL(t, testACL) })
	alice := ca.Client(t, "alice")
	svc := ca.Client(t, "a name no rule knows", "svc.example.org")
	batch := ca.Issue(t, testcerts.Spec{CN: "batch-7", URIs: []string{"spiffe://example.org/batch"}})
	ops := ca.Issue(t, testcerts.Spec{CN: "operator", Emails: []string{"ops@example.org"}})
	nobody := ca.Client(t, "nobody")

	denied := 0
	for _, tt := range []struct {
		who   string
		leaf  *testcerts.Leaf
		lock  string
		allow bool
	}{
		{"alice", alice, "jobs/nightly", true},
		{"alice", alice, "deploy/web", true},
		{"alice", alice, "deploy/web2", true}, // a prefix, not a name
		{"alice", alice, "deploy/db", false},
		{"alice", alice, "job", false},
		{"DNS SAN", svc, "svc/api", true},
		{"DNS SAN", svc, "jobs/nightly", false},
		{"URI SAN", batch, "batch/x", true},
		{"URI SAN", batch, "svc/api", false},
		{"email SAN", ops, "anything/at/all", true},
		{"any verified client", nobody, "shared/cache", true},
		{"any verified client", nobody, "jobs/nightly", false},
	} {
		c, err := dialTLS(t, s.ts.Addr, s.clientConfig(tt.leaf))
		if err != nil {
			t.Fatalf("%s: handshake: %v", tt.who, err)
		}
		owner := tt.who + " " + tt.lock
		c.Acquire(tt.lock, 10*time.Second, false, owner)
		if tt.allow {
			f := c.ReadFrame(frameWait)
			if f.Type != wire.TypeAcquired && f.Type != wire.TypeWaiting {
				t.Errorf("%s acquiring %q: got %v, want it allowed", tt.who, tt.lock, f)
			}
			continue
		}
		// What follows the refused ACQUIRE is never processed.
		c.Conn.Write(acquireFrame(1, 0, 10000, "jobs/x", ""))
		e := expectError(t, c, wire.CodeUnauthorized)
		denied++
		if !strings.Contains(e.Msg, tt.lock) {
			t.Errorf("%s acquiring %q: message %q does not name the lock", tt.who, tt.lock, e.Msg)
		}
		if v, ok := s.ts.Srv.Lock(tt.lock); ok {
			all := v.Waiters
			if v.Holder != nil {
				all = append(all, *v.Holder)
			}
			for _, sv := range all {
				if sv.Owner == owner {
					t.Errorf("%s acquiring %q: refused session in the table: %+v", tt.who, tt.lock, sv)
				}
			}
		}
	}
	if got := s.acl(); got != float64(denied) {
		t.Errorf("baton_acl_refusals_total %v, want %d", got, denied)
	}
	if got := counterValue(s.ts, "baton_protocol_errors_total", "code", "UNAUTHORIZED"); got != float64(denied) {
		t.Errorf(`baton_protocol_errors_total{code="UNAUTHORIZED"} %v, want %d`, got, denied)
	}

	// New rules apply to the next ACQUIRE.
	s.ts.Srv.SetACL(mustACL(t, `{"rules": [{"clients": ["nobody"], "locks": ["jobs/"]}]}`))
	c, err := dialTLS(t, s.ts.Addr, s.clientConfig(nobody))
	if err != nil {
		t.Fatal(err)
	}
	c.Acquire("jobs/later", 10*time.Second, false, "")
	expectAcquired(t, c)
	c, err = dialTLS(t, s.ts.Addr, s.clientConfig(alice))
	if err != nil {
		t.Fatal(err)
	}
	c.Acquire("jobs/later2", 10*time.Second, false, "")
	expectError(t, c, wire.CodeUnauthorized)
}

func (s *tlsServer) acl() float64 {
	mfs, _ := s.ts.Srv.Registry().Gather()
	for _, mf := range mfs {
		if mf.GetName() == "baton_acl_refusals_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// TestACLWithoutIdentity: under access rules, a client without a verified
// certificate (plain TCP here) has no identity and "*" does not match it.
func TestACLWithoutIdentity(t *testing.T) {
	t.Parallel()
	acl := mustACL(t, `{"rules": [{"clients": ["*"], "locks": [""]}]}`)
	ts := batontest.StartServer(t, func(c *server.Config) { c.ACL = acl })
	c := batontest.Dial(t, ts.Addr)
	c.Acquire("x", 10*time.Second, false, "")
	e := expectError(t, c, wire.CodeUnauthorized)
	if !strings.Contains(e.Msg, "without a verified client certificate") {
		t.Errorf("message %q does not say why", e.Msg)
	}
}

func TestParseACL(t *testing.T) {
	t.Parallel()
	a := mustACL(t, testACL)
	if a.Rules() != 5 || !a.HasAdmin() {
		t.Errorf("Rules %d HasAdmin %v, want 5 true", a.Rules(), a.HasAdmin())
	}
	if !a.MayAdmin([]string{"operator", "ops@example.org"}, "jobs/x") || a.MayAdmin([]string{"ops@example.org"}, "deploy/web") {
		t.Error("MayAdmin does not follow the admin prefixes")
	}
	if a.MayAdmin([]string{"alice"}, "jobs/x") {
		t.Error("alice may admin jobs/ without an admin grant")
	}
	for _, tt := range []struct{ text, want string }{
		{``, "not a JSON rules object"},
		{`[]`, "not a JSON rules object"},
		{`{}`, `no "rules" list`},
		{`{"rules": [], "x": 1}`, `unknown field "x"`},
		{`{"rules": [{"clients": ["a"], "locks": ["b"], "lock": ["c"]}]}`, `unknown field "lock"`},
		{`{"rules": [{"locks": ["b"]}]}`, "rule 1 has no clients"},
		{`{"rules": [{"clients": ["a"], "locks": ["b"]}, {"clients": [""], "locks": ["b"]}]}`, "rule 2 has an empty client"},
		{`{"rules": [{"clients": ["a"]}]}`, `rule 1 grants nothing`},
		{`{"rules": [{"clients": ["a"], "locks": ["` + strings.Repeat("x", 256) + `"]}]}`, "longer than any lock name"},
		{`{"rules": []} {}`, "text after the JSON rules object"},
		{`{"rules": [{"clients": ["a"], "admin": ["b"], "kinds": ["shared"]}]}`, `rule 1 gives "kinds" but no "locks"`},
		{`{"rules": [{"clients": ["a"], "locks": ["b"], "kinds": []}]}`, `rule 1 has an empty "kinds"`},
		{`{"rules": [{"clients": ["a"], "locks": ["b"], "kinds": ["reader"]}]}`, `rule 1: unknown kind "reader"`},
		{`{"rules": [{"clients": ["a"], "locks": ["b"], "kinds": ["limit:0"]}]}`, `rule 1: kind "limit:0": the limit must be * or 1 to 65535`},
		{`{"rules": [{"clients": ["a"], "locks": ["b"], "kinds": ["limit:65536"]}]}`, `kind "limit:65536"`},
	} {
		_, err := server.ParseACL([]byte(tt.text))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseACL(%q): %v, want an error with %q", tt.text, err, tt.want)
		}
	}
	if a := mustACL(t, `{"rules": []}`); a.MayAcquire([]string{"a"}, "x") {
		t.Error("empty rules allow an ACQUIRE")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.json")
	if _, err := server.LoadACL(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("LoadACL of a missing file: %v, want an error naming it", err)
	}
	os.WriteFile(file, []byte(`{"rules": [{"clients": ["a"]}]}`), 0o600)
	if _, err := server.LoadACL(file); err == nil || !strings.Contains(err.Error(), file+": rule 1") {
		t.Errorf("LoadACL of a bad file: %v, want an error naming the file and the rule", err)
	}
}

// TestACLKinds: a rule's "kinds" name the claims its "locks" allow, each
// rule for its own prefixes; a rule without them allows every kind.
func TestACLKinds(t *testing.T) {
	t.Parallel()
	a := mustACL(t, `{"rules": [
	  {"clients": ["reader"], "locks": ["conf/"], "kinds": ["shared"]},
	  {"clients": ["gpu"], "locks": ["gpu/"], "kinds": ["limit:4", "exclusive"]},
	  {"clients": ["pool"], "locks": ["pool/"], "kinds": ["limit:*"]},
	  {"clients": ["writer"], "locks": ["conf/"], "kinds": ["exclusive"]},
	  {"clients": ["writer"], "locks": ["jobs/"]}
	]}`)
	excl := server.Kind{}
	reader := server.Kind{Shared: true, Limit: wire.MaxLimit}
	slot := func(n int) server.Kind { return server.Kind{Shared: true, Limit: n} }
	for _, tt := range []struct {
		who, lock string
		k         server.Kind
		allow     bool
	}{
		{"reader", "conf/db", reader, true},
		{"reader", "conf/db", excl, false},
		{"reader", "conf/db", slot(1), false}, // the review's silent waiter with limit 1
		{"reader", "jobs/x", reader, false},
		{"gpu", "gpu/a", slot(4), true},
		{"gpu", "gpu/a", slot(5), false},
		{"gpu", "gpu/a", excl, true},
		{"gpu", "gpu/a", reader, false},
		{"pool", "pool/x", slot(1), true},
		{"pool", "pool/x", reader, true},
		{"pool", "pool/x", excl, false},
		{"writer", "conf/db", excl, true},
		{"writer", "conf/db", reader, false},
		{"writer", "jobs/x", slot(7), true}, // no kinds: every kind, as before
		{"writer", "jobs/x", excl, true},
	} {
		if got := a.MayClaim([]string{tt.who}, tt.lock, tt.k); got != tt.allow {
			t.Errorf("MayClaim(%s, %q, %v) = %v, want %v", tt.who, tt.lock, tt.k, got, tt.allow)
		}
	}
	if !a.MayAcquire([]string{"reader"}, "conf/db") {
		t.Error("MayAcquire(reader, conf/db) = false, want true: some kind is allowed")
	}
}
