package cli

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testcerts"
)

// TestBinaryDashboardSessions: where /v1/ needs a client certificate, the
// admin token alone opens no dashboard session (the review opened 10,000
// with it, after which the operator's login got 503 for 12 hours); with a
// certificate, one identity keeps at most 16 sessions (its next login ends
// its oldest), so a caller that logs in 10,000 times never locks out
// another; and a session's cookie works only for the identity that opened
// it.
func TestBinaryDashboardSessions(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.bundle,
		"-ops-tls-client-ca", p.caFile, "-acl-file", p.acl, "-admin-token-file", p.token, "-log-format=json")
	logs := startLogged(t, serve)
	sl := waitServing(t, logs.next)
	go func() { // each login is logged: keep the server's stderr flowing
		for range logs.lines {
		}
	}()
	base := "https://" + sl.OpsAddr

	clientAs := func(cert *testcerts.Files) *http.Client {
		cfg := &tls.Config{RootCAs: p.ca.Pool()}
		if cert != nil {
			c, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 1}}
	}
	login := func(hc *http.Client) (int, *http.Cookie) {
		resp, err := hc.Post(base+"/ui/login", "application/json", strings.NewReader(`{"token": "`+p.tokenText+`"}`))
		if err != nil {
			t.Fatalf("login: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == "baton_session" && c.Value != "" {
				return resp.StatusCode, c
			}
		}
		return resp.StatusCode, nil
	}
	loggedIn := func(hc *http.Client, c *http.Cookie) bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/ui/session", nil)
		req.AddCookie(c)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct {
			LoggedIn bool `json:"logged_in"`
		}
		json.NewDecoder(resp.Body).Decode(&s)
		return s.LoggedIn
	}

	// The token alone.
	if code, c := login(clientAs(nil)); code != http.StatusUnauthorized || c != nil {
		t.Errorf("login with the token and no client certificate: %d (cookie %v), want 401 and no session", code, c != nil)
	}

	// One identity's flood of logins, then another's login.
	worker, operator := clientAs(&p.worker), clientAs(&p.operator)
	start := time.Now()
	var first, last *http.Cookie
	const flood = 10000
	for i := range flood {
		code, c := login(worker)
		if code != http.StatusOK {
			t.Fatalf("worker's login %d of %d: %d, want 200 (its oldest session ends)", i+1, flood, code)
		}
		if i == 0 {
			first = c
		}
		last = c
	}
	t.Logf("%d logins of one identity in %v", flood, time.Since(start).Round(time.Millisecond))
	if code, c := login(operator); code != http.StatusOK || c == nil {
		t.Fatalf("operator's login after %d of worker's: %d, want 200", flood, code)
	}
	if loggedIn(worker, first) {
		t.Errorf("worker's first session still open after %d more logins, want it ended (16 per identity)", flood-1)
	}
	if !loggedIn(worker, last) {
		t.Errorf("worker's last session is not open")
	}
	if loggedIn(operator, last) {
		t.Errorf("worker's cookie opens a session for operator's certificate")
	}
}
