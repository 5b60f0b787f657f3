package ops_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// The ops API of protocol version 2's names with several holders, against
// the real server.

// sharedClaim connects a shared claim of name with limit; it returns the
// connection and the first frame's type.
func sharedClaim(t *testing.T, ts *batontest.Server, name string, limit uint16, owner string) (*batontest.Conn, batontest.Frame) {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.AcquireV2(name, time.Minute, true, limit, false, owner)
	return c, c.ReadFrame(5 * time.Second)
}

// TestSharedLockJSON: LOCK shows every holder in grant order (holder is
// the first), the limit in force, and each SESSION's shared flag; a
// mutex's LOCK has its one holder in holders and limit null.
func TestSharedLockJSON(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	sharedClaim(t, ts, "sem", 3, "r1")
	sharedClaim(t, ts, "sem", 3, "r2")
	w := batontest.Dial(t, ts.Addr)
	w.Acquire("sem", time.Minute, false, "writer")
	w.ReadFrame(5 * time.Second)
	sharedClaim(t, ts, "sem", 3, "r3")
	holdLock(t, ts, "mutex")

	var sem struct {
		Name    string           `json:"name"`
		Holder  map[string]any   `json:"holder"`
		Holders []map[string]any `json:"holders"`
		Limit   *int             `json:"limit"`
		Waiters []map[string]any `json:"waiters"`
	}
	getJSON(t, hs.URL+"/v1/locks/sem", &sem)
	if len(sem.Holders) != 2 || sem.Limit == nil || *sem.Limit != 3 || len(sem.Waiters) != 2 {
		t.Fatalf("GET /v1/locks/sem: got %+v, want 2 holders, limit 3, 2 waiters", sem)
	}
	if sem.Holder["id"] != sem.Holders[0]["id"] || sem.Holders[0]["owner"] != "r1" || sem.Holders[1]["owner"] != "r2" {
		t.Fatalf("holder %v, holders %v: want r1 then r2, holder the first", sem.Holder, sem.Holders)
	}
	t0, _ := sem.Holders[0]["token"].(float64)
	t1, _ := sem.Holders[1]["token"].(float64)
	if sem.Holders[0]["shared"] != true || t0 == 0 || t1 <= t0 {
		t.Fatalf("holders %v: want shared, with tokens rising in grant order", sem.Holders)
	}
	if sem.Waiters[0]["shared"] != false || sem.Waiters[1]["shared"] != true || sem.Waiters[0]["token"] != nil {
		t.Fatalf("waiters %v: want the writer (not shared), then a reader, without tokens", sem.Waiters)
	}
	var mutex struct {
		Holder  map[string]any   `json:"holder"`
		Holders []map[string]any `json:"holders"`
		Limit   *int             `json:"limit"`
	}
	raw := getJSON(t, hs.URL+"/v1/locks/mutex", &mutex)
	if len(mutex.Holders) != 1 || mutex.Holders[0]["id"] != mutex.Holder["id"] || mutex.Holder["shared"] != false || !strings.Contains(raw, `"limit":null`) {
		t.Fatalf("GET /v1/locks/mutex: got %s, want its one holder in holders and limit null", raw)
	}
}

// getJSON decodes the 200 answer of GET url into v and returns its text.
func getJSON(t *testing.T, url string, v any) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	dec := json.NewDecoder(resp.Body)
	var m json.RawMessage
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	b.Write(m)
	if err := json.Unmarshal(m, v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// post sends POST url and returns the status and the decoded JSON object.
func post(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("POST %s: %d, body not JSON: %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode, m
}

// TestReleaseSeveralHolders: POST /v1/locks/{name}/release ends every
// holder and answers {"released": [...]} in grant order, each with its own
// force_released event naming its session; the queue then moves once. A
// name with one holder, shared or not, answers its SESSION as before. POST
// /v1/sessions/{id}/release ends one holder alone: 404 for an unknown
// session, 409 for a waiter.
func TestReleaseSeveralHolders(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	events := openStream(t, hs.URL+"/v1/events?lock=sem", nil)
	a, _ := sharedClaim(t, ts, "sem", 3, "a")
	b, _ := sharedClaim(t, ts, "sem", 3, "b")
	c, _ := sharedClaim(t, ts, "sem", 3, "c")
	w := batontest.Dial(t, ts.Addr)
	w.Acquire("sem", time.Minute, false, "writer")
	w.ReadFrame(5 * time.Second)
	before, _ := ts.Srv.Lock("sem")

	// One holder alone.
	status, m := post(t, hs.URL+"/v1/sessions/"+before.Holders[1].ID+"/release")
	if status != 200 || m["id"] != before.Holders[1].ID || m["shared"] != true || m["token"] == nil {
		t.Fatalf("POST /v1/sessions/%s/release: got %d %v, want 200 with the holder's SESSION", before.Holders[1].ID, status, m)
	}
	if f := b.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeForceReleased {
		t.Fatalf("released holder: got %v, want ERROR FORCE_RELEASED", f)
	}
	if status, m := post(t, hs.URL+"/v1/sessions/"+before.Waiters[0].ID+"/release"); status != 409 || !strings.Contains(fmt.Sprint(m["error"]), "kick") {
		t.Fatalf("release of a waiter: got %d %v, want 409 pointing to kick", status, m)
	}
	if status, _ := post(t, hs.URL+"/v1/sessions/424242/release"); status != 404 {
		t.Fatalf("release of an unknown session: got %d, want 404", status)
	}
	if status, _ := post(t, hs.URL+"/v1/sessions/x%2Fy/release"); status != 404 {
		t.Fatalf("release of a session id that is no number: got %d, want 404", status)
	}
	// Kicking a holder of several is refused, and says how to end it.
	if status, m := post(t, hs.URL+"/v1/sessions/"+before.Holders[0].ID+"/kick"); status != 409 ||
		!strings.Contains(fmt.Sprint(m["error"]), "/v1/sessions/"+before.Holders[0].ID+"/release") {
		t.Fatalf("kick of a shared holder: got %d %v, want 409 naming the session's release", status, m)
	}

	// Every holder: the two left, in grant order.
	status, m = post(t, hs.URL+"/v1/locks/sem/release")
	list, _ := m["released"].([]any)
	if status != 200 || len(m) != 1 || len(list) != 2 {
		t.Fatalf("POST /v1/locks/sem/release: got %d %v, want 200 {\"released\": [two]}", status, m)
	}
	for i, want := range []string{before.Holders[0].ID, before.Holders[2].ID} {
		s := list[i].(map[string]any)
		if s["id"] != want || s["shared"] != true || s["token"] == nil {
			t.Fatalf("released[%d]: got %v, want session %s, shared, with its token", i, s, want)
		}
	}
	for _, h := range []*batontest.Conn{a, c} {
		if f := h.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeForceReleased {
			t.Fatalf("holder: got %v, want ERROR FORCE_RELEASED", f)
		}
	}
	if f := w.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired || !f.Push {
		t.Fatalf("writer: got %v, want the push", f)
	}
	var ended []string
	for len(ended) < 3 {
		e := events.next(t)
		var d eventData
		json.Unmarshal([]byte(e.Data), &d)
		if e.Type == "force_released" {
			ended = append(ended, d.Session.ID)
		}
	}
	if want := []string{before.Holders[1].ID, before.Holders[0].ID, before.Holders[2].ID}; !slices.Equal(ended, want) {
		t.Fatalf("force_released events name sessions %v, want %v", ended, want)
	}

	// One holder, the writer: its SESSION, as ever.
	status, m = post(t, hs.URL+"/v1/locks/sem/release")
	if status != 200 || m["shared"] != false || m["id"] == nil || m["released"] != nil {
		t.Fatalf("release of a lone holder: got %d %v, want its SESSION", status, m)
	}
}

// TestReleaseSessionRefusals: the new route is an admin action like the
// others: the admin token is required (401 without it), the access rules'
// admin grant for the session's lock too (403, nothing done), and only
// POST is served.
func TestReleaseSessionRefusals(t *testing.T) {
	f := newFake()
	f.add(server.LockView{Name: "sem", Limit: 3, Holders: []server.SessionView{*holder("10", "r1", 20), *holder("11", "r2", 21)}})
	f.locks["sem"].Holder = &f.locks["sem"].Holders[0]
	srv, _ := setup(t, ops.Config{Backend: f, AdminToken: "s3cret"})
	if r := do(t, srv, "POST", "/v1/sessions/11/release", "", ""); r.status != 401 {
		t.Fatalf("without the token: got %d, want 401", r.status)
	}
	if r := do(t, srv, "GET", "/v1/sessions/11/release", "Bearer s3cret", ""); r.status != 405 || r.header.Get("Allow") != "POST" {
		t.Fatalf("GET: got %d Allow %q, want 405 Allow POST", r.status, r.header.Get("Allow"))
	}
	if l, _ := f.Lock("sem"); len(l.Holders) != 2 {
		t.Fatal("a refused request released a holder")
	}

	ca := testcerts.NewCA(t, "ca")
	acl, err := server.ParseACL([]byte(`{"rules": [
		{"clients": ["alice"], "admin": ["jobs"]},
		{"clients": ["sem-admin"], "admin": ["sem"]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	o := serveTLS(t, ca, true, ops.Config{Backend: f, ACL: func() *server.ACL { return acl },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, tt := range []struct {
		who  string
		leaf *testcerts.Leaf
		want int
	}{
		{"no certificate", nil, 403},
		{"alice (admin of jobs only)", ca.Client(t, "alice"), 403},
		{"sem-admin", ca.Client(t, "sem-admin"), 200},
	} {
		status, body, err := o.send("POST", "/v1/sessions/11/release", "", tt.leaf)
		if err != nil {
			t.Fatal(err)
		}
		if status != tt.want {
			t.Fatalf("%s: got %d %s, want %d", tt.who, status, body, tt.want)
		}
		if l, _ := f.Lock("sem"); tt.want == 403 && len(l.Holders) != 2 {
			t.Fatalf("%s: refused, yet a holder was released", tt.who)
		}
	}
	if l, _ := f.Lock("sem"); len(l.Holders) != 1 || l.Holders[0].ID != "10" {
		t.Fatalf("after the allowed release: holders %+v, want 10 alone", l.Holders)
	}
	if n := strings.Count(logs.b.String(), "refused by the access rules"); n != 2 {
		t.Fatalf("%d refusals logged, want 2", n)
	}
}
