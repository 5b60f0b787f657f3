package ops_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"

	"github.com/batonlock/baton/ops"
)

func send(t *testing.T, c *http.Client, method, url, body string, header http.Header) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestDashboardLoginAndCSRF(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{AdminToken: "s3cret"}, nil)
	holdLock(t, ts, "job")
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	same := http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {hs.URL}}

	// The page itself is open and carries a CSP; the API is not.
	code, body, hd := send(t, browser, "GET", hs.URL+"/", "", nil)
	if code != 200 || !strings.Contains(body, "<html") || !strings.Contains(hd.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET /: %d, CSP %q", code, hd.Get("Content-Security-Policy"))
	}
	if code, _, _ := send(t, browser, "GET", hs.URL+"/v1/locks", "", nil); code != 401 {
		t.Fatalf("GET /v1/locks before login: %d, want 401", code)
	}
	if code, _, _ := send(t, browser, "POST", hs.URL+"/ui/login", `{"token":"wrong"}`, same); code != 401 {
		t.Fatalf("login with a wrong token: %d, want 401", code)
	}
	// A cross-site login attempt is refused even with the right token.
	if code, _, _ := send(t, browser, "POST", hs.URL+"/ui/login", `{"token":"s3cret"}`,
		http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"http://evil.example"}}); code != 403 {
		t.Fatalf("cross-site login: %d, want 403", code)
	}
	code, body, hd = send(t, browser, "POST", hs.URL+"/ui/login", `{"token":"s3cret"}`, same)
	if code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	if sc := hd.Get("Set-Cookie"); !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
		t.Fatalf("Set-Cookie %q: want HttpOnly and SameSite=Strict", sc)
	}
	var sess struct {
		LoggedIn bool   `json:"logged_in"`
		CSRF     string `json:"csrf"`
	}
	json.Unmarshal([]byte(body), &sess)
	if !sess.LoggedIn || len(sess.CSRF) < 32 {
		t.Fatalf("login answer %s: want logged_in and a CSRF token", body)
	}
	if code, _, _ := send(t, browser, "GET", hs.URL+"/v1/locks", "", nil); code != 200 {
		t.Fatalf("GET /v1/locks with the cookie: %d, want 200", code)
	}

	// Forged state changes, each with the cookie a browser would attach.
	forged := []struct {
		name   string
		header http.Header
	}{
		{"no CSRF header", same},
		{"wrong CSRF header", http.Header{"Sec-Fetch-Site": {"same-origin"}, "X-Baton-Csrf": {"x" + sess.CSRF}}},
		{"cross-site with the token", http.Header{"Sec-Fetch-Site": {"cross-site"}, "X-Baton-Csrf": {sess.CSRF}}},
		{"foreign origin", http.Header{"Origin": {"http://evil.example"}, "X-Baton-Csrf": {sess.CSRF}}},
		{"same-site sibling", http.Header{"Sec-Fetch-Site": {"same-site"}, "X-Baton-Csrf": {sess.CSRF}}},
	}
	for _, f := range forged {
		if code, body, _ := send(t, browser, "POST", hs.URL+"/v1/locks/job/release", "", f.header); code != 403 {
			t.Errorf("%s: POST release answered %d %s, want 403", f.name, code, body)
		}
	}
	if _, ok := ts.Srv.Lock("job"); !ok {
		t.Fatal("a forged request released the lock")
	}
	ok := http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {hs.URL}, "X-Baton-Csrf": {sess.CSRF}}
	if code, body, _ := send(t, browser, "POST", hs.URL+"/v1/locks/job/release", "", ok); code != 200 {
		t.Fatalf("release from the page: %d %s", code, body)
	}
	// Tools keep using the bearer token, without CSRF headers.
	if code, _, _ := send(t, http.DefaultClient, "GET", hs.URL+"/v1/locks", "", http.Header{"Authorization": {"Bearer s3cret"}}); code != 200 {
		t.Fatalf("bearer GET: %d", code)
	}

	// Logout ends the session on the server, not only the cookie.
	if code, _, _ := send(t, browser, "POST", hs.URL+"/ui/logout", "", same); code != 200 {
		t.Fatalf("logout: %d", code)
	}
	if code, _, _ := send(t, browser, "GET", hs.URL+"/v1/locks", "", nil); code != 401 {
		t.Fatalf("GET /v1/locks after logout: %d, want 401", code)
	}
}

func TestDashboardWithoutToken(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	holdLock(t, ts, "job")
	code, body, _ := send(t, http.DefaultClient, "GET", hs.URL+"/ui/session", "", nil)
	if code != 200 || !strings.Contains(body, `"auth_required":false`) {
		t.Fatalf("GET /ui/session: %d %s", code, body)
	}
	// No token, yet a cross-site form post must not release the lock.
	if code, _, _ := send(t, http.DefaultClient, "POST", hs.URL+"/v1/locks/job/release", "",
		http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"http://evil.example"}}); code != 403 {
		t.Fatalf("cross-site POST without a token: %d, want 403", code)
	}
	// A rebound DNS name is refused for browsers.
	req, _ := http.NewRequest("GET", hs.URL+"/v1/locks", nil)
	req.Host = "evil.example:7071"
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("GET with Host evil.example from a browser: %d, want 403", resp.StatusCode)
	}
	for _, p := range []string{"/ui/../ops.go", "/ui/nothing.js", "/ui/"} {
		if code, _, _ := send(t, http.DefaultClient, "GET", hs.URL+p, "", nil); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	if code, _, _ := send(t, http.DefaultClient, "POST", hs.URL+"/", "", nil); code != 405 {
		t.Errorf("POST /: %d, want 405", code)
	}
}
