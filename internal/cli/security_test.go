package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/testcerts"
)

// pki is a set of certificate files for the CLI tests: a CA signing the
// server and the clients "worker" and "operator", a second CA signing
// "team-b", a client CA bundle of both, access rules and a token.
type pki struct {
	dir                             string
	ca, ca2                         *testcerts.CA
	caFile, bundle, acl, token      string
	server, worker, operator, teamB testcerts.Files
	tokenText                       string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{dir: dir, ca: testcerts.NewCA(t, "ca"), ca2: testcerts.NewCA(t, "ca2")}
	p.server = p.ca.Server(t).Write(t, dir, "server")
	p.worker = p.ca.Client(t, "worker").Write(t, dir, "worker")
	p.operator = p.ca.Client(t, "operator").Write(t, dir, "operator")
	p.teamB = p.ca2.Client(t, "team-b").Write(t, dir, "team-b")
	p.caFile = filepath.Join(dir, "ca.crt")
	testcerts.WriteFile(t, p.caFile, p.ca.PEM)
	p.bundle = filepath.Join(dir, "clients.pem")
	testcerts.WriteFile(t, p.bundle, testcerts.Bundle(p.ca, p.ca2))
	p.acl = filepath.Join(dir, "acl.json")
	testcerts.WriteFile(t, p.acl, []byte(`{"rules": [
		{"clients": ["worker", "team-b"], "locks": ["jobs/"]},
		{"clients": ["operator"], "locks": [""], "admin": [""]}
	]}`))
	p.tokenText = "cli-s3cret-token-of-32-characters-or-more"
	p.token = filepath.Join(dir, "token")
	testcerts.WriteFile(t, p.token, []byte(p.tokenText+"\n"))
	return p
}

func TestServeSecurityUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"-tls-cert=a"}, "tls-cert and tls-key go together: give both or neither"},
		{"key without cert", []string{"-tls-key=a"}, "tls-cert and tls-key go together"},
		{"client CA without TLS", []string{"-tls-client-ca=a"}, "tls-client-ca needs tls-cert and tls-key"},
		{"ops cert without key", []string{"-ops-tls-cert=a"}, "ops-tls-cert needs ops-tls-key"},
		{"ops key without cert", []string{"-ops-tls-key=a"}, "ops-tls-key needs ops-tls-cert"},
		{"ops none with a key", []string{"-ops-tls-cert=none", "-ops-tls-key=a"}, "ops-tls-cert none turns TLS off"},
		{"ops client CA without ops TLS", []string{"-ops-tls-client-ca=a"}, "ops-tls-client-ca needs TLS on the ops listener"},
		{"ops client CA with ops TLS off", []string{"-tls-cert=a", "-tls-key=b", "-ops-tls-cert=none", "-ops-tls-client-ca=c"}, "ops-tls-cert none turns TLS off"},
		{"acl without client CA", []string{"-tls-cert=a", "-tls-key=b", "-acl-file=c"}, "acl-file needs tls-client-ca"},
		{"negative conns per ip", []string{"-max-conns-per-ip=-1"}, "max-conns-per-ip (-1) must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dataDir := filepath.Join(t.TempDir(), "data")
			code, _, stderr := runCLI(t, map[string]string{"BATON_DATA_DIR": dataDir}, append([]string{"serve"}, tt.args...)...)
			if code != exitUsage {
				t.Errorf("exit code %d, want 2", code)
			}
			if l := lines(stderr); len(l) != 1 || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
		})
	}
	// From the environment too.
	code, _, stderr := runCLI(t, map[string]string{"BATON_TLS_CERT": "a"}, "serve")
	if code != exitUsage || !strings.Contains(stderr, "tls-cert and tls-key go together") {
		t.Errorf("BATON_TLS_CERT alone: exit %d, %q", code, stderr)
	}
}

// TestServeSecurityBadFiles: a file that cannot be used stops the start
// with one line naming the flag, exit 1, nothing left bound or written.
func TestServeSecurityBadFiles(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	junk := filepath.Join(p.dir, "junk")
	testcerts.WriteFile(t, junk, []byte("no PEM here\n"))
	adminACL := p.acl // it grants admin actions
	base := []string{"serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0"}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"missing cert", []string{"-tls-cert", filepath.Join(p.dir, "nope.crt"), "-tls-key", p.server.Key}, "tls-cert/tls-key: certificate "},
		{"key of another cert", []string{"-tls-cert", p.server.Cert, "-tls-key", p.worker.Key}, "tls-cert/tls-key:"},
		{"client CA without PEM", []string{"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", junk}, "tls-client-ca: CA bundle " + junk + " holds no PEM certificate"},
		{"ops cert missing", []string{"-ops-tls-cert", filepath.Join(p.dir, "nope.crt"), "-ops-tls-key", p.server.Key}, "ops-tls-cert/ops-tls-key:"},
		{"bad acl", []string{"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.caFile, "-acl-file", junk}, "acl-file: " + junk + ": not a JSON rules object"},
		{"admin rules without ops client CA", []string{"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.caFile, "-acl-file", adminACL},
			"grants admin actions, but the ops listener verifies no client certificates: give ops-tls-client-ca"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dataDir := filepath.Join(t.TempDir(), "data")
			code, _, stderr := runCLI(t, map[string]string{"BATON_DATA_DIR": dataDir}, append(base, tt.args...)...)
			if code != exitFailure {
				t.Errorf("exit code %d, want 1", code)
			}
			if l := lines(stderr); len(l) != 1 || !strings.HasPrefix(l[0], "baton serve: ") || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data directory exists after a failed start (stat: %v)", err)
			}
		})
	}
}

func TestClientTLSUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"run cert without key", []string{"run", "-tls-cert=a", "x", "--", "true"}, "baton run: tls-cert and tls-key go together"},
		{"locks key without cert", []string{"locks", "-tls-key=a"}, "baton locks: tls-cert and tls-key go together"},
		{"locks http with TLS", []string{"locks", "-ops-addr=http://127.0.0.1:1", "-tls-ca=a"}, "ops-addr http://127.0.0.1:1 is plain http, but -tls-* flags are given"},
	} {
		code, _, stderr := runCLI(t, nil, tt.args...)
		if code != exitUsage || len(lines(stderr)) != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tt.name, code, stderr, tt.want)
		}
	}
	code, _, stderr := runCLI(t, nil, "locks", "-tls-ca", filepath.Join(t.TempDir(), "nope"))
	if code != exitFailure || !strings.Contains(stderr, "baton locks: tls-ca: open ") {
		t.Errorf("locks with a missing -tls-ca: exit %d, stderr %q; want 1 naming the flag", code, stderr)
	}
}

// TestBinaryTLS runs the real binary with mutual TLS on both listeners,
// access rules and a token, and checks what a user sees: baton run with
// and without a certificate, the ops API over HTTPS with and without the
// token, and SIGHUP revoking a CA while a session of it carries on.
func TestBinaryTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.bundle,
		"-ops-tls-client-ca", p.caFile, "-acl-file", p.acl, "-admin-token-file", p.token)
	serve.Env = append(serve.Env, "BATON_LOG_FORMAT=json")
	logs := startLogged(t, serve)
	sl := waitServing(t, logs.next)

	// baton run, as a user runs it.
	runArgs := func(cert testcerts.Files, lock string) []string {
		args := []string{"run", "-addr", sl.Addr, "-tls-ca", p.caFile}
		if cert.Cert != "" {
			args = append(args, "-tls-cert", cert.Cert, "-tls-key", cert.Key)
		}
		return append(args, lock, "--", "sh", "-c", `echo "held $BATON_LOCK"`)
	}
	for _, tt := range []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"worker", runArgs(p.worker, "jobs/a"), 0, "held jobs/a", ""},
		{"no certificate", runArgs(testcerts.Files{}, "jobs/a"), 1, "", "refused the TLS handshake"},
		{"plain", []string{"run", "-addr", sl.Addr, "jobs/a", "--", "true"}, 1, "", "UNAUTHORIZED: this server requires TLS"},
		{"denied lock", runArgs(p.worker, "deploy/web"), 1, "", `may not acquire lock "deploy/web"`},
	} {
		cmd := batonCmd(t, tt.args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if code != tt.code || !strings.Contains(string(out), tt.out) || !strings.Contains(stderr.String(), tt.err) {
			t.Errorf("baton run (%s): exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.name, code, out, stderr.String(), tt.code, tt.out, tt.err)
		}
	}

	// The ops API over HTTPS.
	opsURL := "https://" + sl.OpsAddr
	get := func(path, auth string, cert *testcerts.Files) int {
		cfg := &tls.Config{RootCAs: p.ca.Pool()}
		if cert != nil {
			c, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		req, _ := http.NewRequest(http.MethodGet, opsURL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		path, auth string
		cert       *testcerts.Files
		want       int
	}{
		{"/healthz", "", nil, 200},
		{"/v1/locks", "", &p.operator, 401},
		{"/v1/locks", "Bearer wrong-" + p.tokenText, &p.operator, 401},
		{"/v1/locks", "Bearer " + p.tokenText, nil, 401}, // no client certificate
		{"/v1/locks", "Bearer " + p.tokenText, &p.operator, 200},
	} {
		if got := get(tt.path, tt.auth, tt.cert); got != tt.want {
			t.Errorf("GET %s (auth %q, cert %v): %d, want %d", tt.path, tt.auth, tt.cert != nil, got, tt.want)
		}
	}

	// SIGHUP after removing team B's CA from the bundle: its session
	// carries on, a new one is refused.
	clientTLS := func(f testcerts.Files) baton.Option {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		return baton.WithTLSConfig(&tls.Config{RootCAs: p.ca.Pool(),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }})
	}
	client, err := baton.New([]string{sl.Addr}, clientTLS(p.teamB), baton.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := client.Acquire(ctx, "jobs/long")
	if err != nil {
		t.Fatalf("team B before the reload: %v", err)
	}
	defer held.Release()
	testcerts.WriteFile(t, p.bundle, p.ca.PEM)
	if err := serve.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logs.waitFor(t, "reloaded on SIGHUP")
	if _, err := client.Acquire(ctx, "jobs/other"); !errors.Is(err, baton.ErrUnauthorized) {
		t.Errorf("team B after the reload: %v, want ErrUnauthorized", err)
	}
	// Two leases later the first session still holds.
	select {
	case <-held.Context().Done():
		t.Fatalf("team B's session ended after the reload: %v", context.Cause(held.Context()))
	case <-time.After(2 * time.Second):
	}
	if err := held.Release(); err != nil {
		t.Errorf("release of team B's lock: %v", err)
	}

	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if s := logs.drain(t); strings.Contains(s, p.tokenText) {
		t.Errorf("the log shows the admin token:\n%s", s)
	}
}
