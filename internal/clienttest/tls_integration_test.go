package clienttest

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/testcerts"
	"github.com/batonlock/baton/server"
)

// TestMutualTLSWithServer: against the real server with mutual TLS and
// access rules, a client with a good certificate takes its lock; one the
// server refuses (no certificate, an expired one, one of another CA, plain
// TCP, a lock the rules deny) fails at once with ErrUnauthorized instead
// of reconnecting for ever.
func TestMutualTLSWithServer(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	dir := t.TempDir()
	sf := ca.Server(t).Write(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	testcerts.WriteFile(t, caFile, ca.PEM)
	rl, err := server.NewTLSReloader(server.TLSFiles{CertFile: sf.Cert, KeyFile: sf.Key, ClientCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	acl, err := server.ParseACL([]byte(`{"rules": [{"clients": ["worker"], "locks": ["jobs/"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ts := batontest.StartServer(t, func(c *server.Config) { c.TLS = rl.Config(); c.ACL = acl })

	withCert := func(leaf *testcerts.Leaf) baton.Option {
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if leaf != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil }
		}
		return baton.WithTLSConfig(cfg)
	}
	worker := ca.Client(t, "worker")
	l := acquire(t, newTestClient(t, []string{ts.Addr}, withCert(worker)), "jobs/nightly")
	if l.Token() == 0 {
		t.Fatal("token 0")
	}

	expired := ca.Issue(t, testcerts.Spec{CN: "worker", NotAfter: time.Now().Add(-time.Minute)})
	foreign := testcerts.NewCA(t, "other").Client(t, "worker")
	for _, tt := range []struct {
		name string
		opt  baton.Option
		lock string
		want string
	}{
		{"no certificate", withCert(nil), "jobs/a", "refused the TLS handshake"},
		{"expired certificate", withCert(expired), "jobs/a", "refused the TLS handshake"},
		{"certificate of another CA", withCert(foreign), "jobs/a", "refused the TLS handshake"},
		{"plain TCP", baton.WithTLSConfig(nil), "jobs/a", "this server requires TLS"},
		{"lock the rules deny", withCert(worker), "deploy/web", `may not acquire lock "deploy/web"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err := newTestClient(t, []string{ts.Addr}, tt.opt).Acquire(ctx, tt.lock)
			if !errors.Is(err, baton.ErrUnauthorized) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Acquire: %v, want ErrUnauthorized with %q", err, tt.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refused after %v, want at once", d)
			}
		})
	}
}
