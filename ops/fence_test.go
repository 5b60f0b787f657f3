package ops_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// highTokens makes the server's tokens start at the top epoch, where a
// token is above 2^63 and two neighbours are one float64 apart only every
// 2048: a check that compared tokens as doubles would take t+1 for t.
func highTokens(base uint64) func(*server.Config) {
	return func(c *server.Config) {
		var n atomic.Uint64
		n.Store(base)
		c.NextToken = func() uint64 { return n.Add(1) }
	}
}

type fenceAnswer struct {
	Error   string   `json:"error"`
	Name    string   `json:"name"`
	Token   string   `json:"token_str"`
	Current bool     `json:"current"`
	Tokens  []string `json:"tokens"`
}

func getFence(t *testing.T, hs *httptest.Server, path, auth string) (int, fenceAnswer, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var a fenceAnswer
	json.Unmarshal(raw, &a)
	return resp.StatusCode, a, string(raw)
}

// TestFenceCheck: GET /v1/locks/{name}/fence?token=T answers 200 for the
// token of each current holder and 409 with the current tokens for any
// other, exactly at 64 bits (the neighbours of a holder's token are not
// current).
func TestFenceCheck(t *testing.T) {
	const base = 0xFFFFFF0000000000 // epoch 2^24-1, the last one
	ts, hs := startEvents(t, ops.Config{}, nil, highTokens(base))
	holdLock(t, ts, "jobs/a")
	r1, _ := sharedClaim(t, ts, "sem", 2, "r1")
	sharedClaim(t, ts, "sem", 2, "r2")
	tok := func(n uint64) string { return strconv.FormatUint(base+n, 10) }

	for _, c := range []struct {
		path    string
		status  int
		current bool
		tokens  []string
		msg     string
	}{
		{"/v1/locks/jobs%2Fa/fence?token=" + tok(1), 200, true, []string{tok(1)}, ""},
		{"/v1/locks/jobs%2Fa/fence?token=" + tok(0), 409, false, []string{tok(1)}, `token 18446742974197923840 is not current: lock "jobs/a" is held with token 18446742974197923841`},
		{"/v1/locks/jobs%2Fa/fence?token=" + tok(2), 409, false, []string{tok(1)}, "is not current"},
		{"/v1/locks/sem/fence?token=" + tok(2), 200, true, []string{tok(2), tok(3)}, ""},
		{"/v1/locks/sem/fence?token=" + tok(3), 200, true, []string{tok(2), tok(3)}, ""},
		{"/v1/locks/sem/fence?token=" + tok(1), 409, false, []string{tok(2), tok(3)}, "is held with tokens " + tok(2) + ", " + tok(3)},
		{"/v1/locks/nobody/fence?token=" + tok(1), 409, false, []string{}, `lock "nobody" has no holder`},
	} {
		status, a, raw := getFence(t, hs, c.path, "")
		if status != c.status || a.Current != c.current || !slices.Equal(a.Tokens, c.tokens) || !strings.Contains(a.Error, c.msg) {
			t.Errorf("GET %s: got %d %s, want %d current=%v tokens %v error containing %q", c.path, status, raw, c.status, c.current, c.tokens, c.msg)
		}
		if c.status == 200 && a.Error != "" {
			t.Errorf("GET %s: 200 with an error %q", c.path, a.Error)
		}
	}

	// A holder that leaves is no longer current; the other still is.
	r1.Conn.Close()
	batontest.Eventually(t, 5*time.Second, func() bool {
		status, _, _ := getFence(t, hs, "/v1/locks/sem/fence?token="+tok(2), "")
		return status == 409
	}, "the token of a closed holder is still current")
	if status, a, raw := getFence(t, hs, "/v1/locks/sem/fence?token="+tok(3), ""); status != 200 || !slices.Equal(a.Tokens, []string{tok(3)}) {
		t.Fatalf("the remaining holder: got %d %s, want 200 with its token alone", status, raw)
	}

	for _, bad := range []struct{ query, msg string }{
		{"", "needs exactly one ?token=T"},
		{"?token=1&token=2", "needs exactly one ?token=T"},
		{"?token=", `token "" is not a decimal number`},
		{"?token=abc", `token "abc" is not a decimal number`},
		{"?token=-1", `token "-1" is not a decimal number`},
		{"?token=%2B5", `token "+5" is not a decimal number`},
		{"?token=1e3", `token "1e3" is not a decimal number`},
		{"?token=0", "token 0 is never granted"},
		{"?token=18446744073709551616", "larger than 2^64-1"},
	} {
		status, a, raw := getFence(t, hs, "/v1/locks/jobs%2Fa/fence"+bad.query, "")
		if status != 400 || !strings.Contains(a.Error, bad.msg) {
			t.Errorf("GET fence%s: got %d %s, want 400 with %q", bad.query, status, raw, bad.msg)
		}
	}
	if r := do(t, hs, "POST", "/v1/locks/jobs%2Fa/fence?token="+tok(1), "", ""); r.status != 405 {
		t.Errorf("POST fence: got %d, want 405", r.status)
	}
}

// TestFenceCheckNeedsReadAccess: the check is a read of the lock, so it
// needs what GET /v1/locks/{name} needs: the admin token when one is set.
func TestFenceCheckNeedsReadAccess(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{AdminToken: "s3cret"}, nil)
	holdLock(t, ts, "jobs")
	v, _ := ts.Srv.Lock("jobs")
	path := "/v1/locks/jobs/fence?token=" + strconv.FormatUint(v.Holder.Token, 10)
	for _, auth := range []string{"", "Bearer wrong"} {
		if status, a, raw := getFence(t, hs, path, auth); status != 401 || a.Current || len(a.Tokens) != 0 {
			t.Errorf("fence check with Authorization %q: got %d %s, want 401 telling no token", auth, status, raw)
		}
	}
	if status, _, raw := getFence(t, hs, path, "Bearer s3cret"); status != 200 {
		t.Errorf("fence check with the admin token: got %d %s, want 200", status, raw)
	}
}
