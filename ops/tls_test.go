package ops_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// tlsOps serves the ops API over TLS on loopback, as baton serve does: a
// TLS listener with a reloadable configuration under an http.Server.
type tlsOps struct {
	url string
	ca  *testcerts.CA
}

func serveTLS(t *testing.T, ca *testcerts.CA, clientCA bool, cfg ops.Config) *tlsOps {
	t.Helper()
	dir := t.TempDir()
	sf := ca.Server(t).Write(t, dir, "ops")
	files := server.TLSFiles{CertFile: sf.Cert, KeyFile: sf.Key}
	if clientCA {
		files.ClientCAFile = filepath.Join(dir, "ca.pem")
		files.ClientCertOptional = true
		testcerts.WriteFile(t, files.ClientCAFile, ca.PEM)
	}
	rl, err := server.NewTLSReloader(files)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend == nil {
		cfg.Backend = newFake()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: ops.NewHandler(cfg), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(tls.NewListener(ln, rl.Config()))
	}()
	t.Cleanup(func() {
		hs.Close()
		<-done
	})
	return &tlsOps{url: "https://" + ln.Addr().String(), ca: ca}
}

// get sends method path over a fresh TLS connection that trusts the CA
// and presents leaf (if not nil); the error is the transport's.
func (o *tlsOps) send(method, path, auth string, leaf *testcerts.Leaf) (int, string, error) {
	cfg := &tls.Config{RootCAs: o.ca.Pool()}
	if leaf != nil {
		// Presented whatever the server asks for (Go's client would send
		// none rather than one of a CA the server does not name).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil }
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	req, err := http.NewRequest(method, o.url+path, nil)
	if err != nil {
		return 0, "", err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestTLSAdminToken: over TLS, /v1/ without the token or with a wrong one
// is 401, with it 200, and no log line shows either token.
func TestTLSAdminToken(t *testing.T) {
	const token = "tls-s3cret-token"
	var logs syncBuffer
	o := serveTLS(t, testcerts.NewCA(t, "ca"), false, ops.Config{
		AdminToken: token,
		Logger:     slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	for _, tt := range []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/v1/locks", "", 401},
		{"GET", "/v1/locks", "Bearer wrong-" + token, 401},
		{"GET", "/v1/locks", "Bearer " + token[:len(token)-1], 401},
		{"POST", "/v1/locks/solo/release", "Bearer wrong-" + token, 401},
		{"GET", "/v1/locks", "Bearer " + token, 200},
		{"POST", "/v1/locks/solo/release", "Bearer " + token, 200},
		{"GET", "/healthz", "", 200},
	} {
		status, body, err := o.send(tt.method, tt.path, tt.auth, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.path, err)
		}
		if status != tt.want {
			t.Errorf("%s %s with %q: got %d %s, want %d", tt.method, tt.path, tt.auth, status, body, tt.want)
		}
	}
	// Plain HTTP to the TLS listener gets no API answer.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(strings.Replace(o.url, "https", "http", 1) + "/v1/locks")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: got %d, want 400", resp.StatusCode)
		}
	}
	if strings.Contains(logs.b.String(), "s3cret") {
		t.Errorf("logs show a token: %s", logs.b.String())
	}
	if !strings.Contains(logs.b.String(), "unauthorized request") {
		t.Errorf("no log line for the refused requests: %s", logs.b.String())
	}
}

// TestRequireClientCert: with RequireClientCert, /v1/ needs a verified
// client certificate; the probes and /metrics do not. A certificate of
// another CA fails the handshake.
func TestRequireClientCert(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	o := serveTLS(t, ca, true, ops.Config{RequireClientCert: true, Logger: slog.New(slog.DiscardHandler)})
	good := ca.Client(t, "operator")
	for _, p := range []string{"/v1/locks", "/v1/events"} { // the event stream under the same rule
		if status, body, _ := o.send("GET", p, "", nil); status != 401 || !strings.Contains(body, "client certificate is required") {
			t.Errorf("%s without a certificate: got %d %s, want 401", p, status, body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if status, _, err := o.send("GET", p, "", nil); status != 200 {
			t.Errorf("%s without a certificate: got %d %v, want 200", p, status, err)
		}
	}
	if status, body, err := o.send("GET", "/v1/locks", "", good); status != 200 {
		t.Errorf("/v1/locks with a certificate: got %d %s %v, want 200", status, body, err)
	}
	foreign := testcerts.NewCA(t, "other").Client(t, "operator")
	_, _, err := o.send("GET", "/v1/locks", "", foreign)
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("/v1/locks with a certificate of another CA: %v, want the handshake refused", err)
	}
}

// TestAdminACL: under access rules, force-release and kick need an "admin"
// prefix for the lock; reads need none.
func TestAdminACL(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	acl, err := server.ParseACL([]byte(`{"rules": [
		{"clients": ["alice"], "admin": ["jobs"]},
		{"clients": ["bob"], "locks": [""]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	f := newFake()
	o := serveTLS(t, ca, true, ops.Config{Backend: f, ACL: func() *server.ACL { return acl },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	alice, bob := ca.Client(t, "alice"), ca.Client(t, "bob")
	for _, tt := range []struct {
		who          string
		leaf         *testcerts.Leaf
		method, path string
		want         int
	}{
		{"bob", bob, "GET", "/v1/locks", 200},
		{"bob", bob, "POST", "/v1/locks/jobs/release", 403},
		{"no certificate", nil, "POST", "/v1/locks/jobs/release", 403},
		{"alice", alice, "POST", "/v1/locks/solo/release", 403},
		{"alice", alice, "POST", "/v1/sessions/4/kick", 403}, // a waiter of "queue"
		{"bob", bob, "POST", "/v1/sessions/2/kick", 403},
		{"alice", alice, "POST", "/v1/sessions/2/kick", 200}, // a waiter of "jobs"
		{"alice", alice, "POST", "/v1/locks/jobs/release", 200},
		{"alice", alice, "POST", "/v1/sessions/99/kick", 404},
	} {
		status, body, err := o.send(tt.method, tt.path, "", tt.leaf)
		if err != nil {
			t.Fatalf("%s %s %s: %v", tt.who, tt.method, tt.path, err)
		}
		if status != tt.want {
			t.Errorf("%s %s %s: got %d %s, want %d", tt.who, tt.method, tt.path, status, body, tt.want)
		}
	}
	if _, ok := f.Lock("solo"); !ok {
		t.Error("lock solo released by a refused request")
	}
	if l, _ := f.Lock("queue"); len(l.Waiters) != 1 {
		t.Error("waiter of queue kicked by a refused request")
	}
	if n := bytes.Count(logs.b.Bytes(), []byte("refused by the access rules")); n != 5 {
		t.Errorf("%d log lines for refusals, want 5: %s", n, logs.b.String())
	}
}
