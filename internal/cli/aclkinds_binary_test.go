package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/testcerts"
)

// TestBinaryACLKinds: the access rules name the kinds of claim they allow.
// A read-only identity ("worker": shared claims on conf/) can neither take
// an exclusive claim nor queue a shared waiter with another limit (limit
// 1: the silent waiter that made every other team's shared claims fail
// with LIMIT_MISMATCH); another team's readers then hold together. A rule
// without kinds allows every kind, as before.
func TestBinaryACLKinds(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	acl := filepath.Join(p.dir, "acl-kinds.json")
	testcerts.WriteFile(t, acl, []byte(`{"rules": [
		{"clients": ["worker"], "locks": ["conf/"], "kinds": ["shared"]},
		{"clients": ["worker"], "locks": ["jobs/"]},
		{"clients": ["team-b"], "locks": ["conf/"], "kinds": ["shared", "exclusive"]},
		{"clients": ["operator"], "locks": [""], "admin": [""]}
	]}`))
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-tls-client-ca", p.bundle,
		"-ops-tls-client-ca", p.caFile, "-acl-file", acl, "-admin-token-file", p.token, "-log-format=json")
	logs := startLogged(t, serve)
	sl := waitServing(t, logs.next)

	run := func(cert testcerts.Files, flags ...string) (int, string) {
		args := append([]string{"run", "-addr", sl.Addr, "-tls-ca", p.caFile, "-tls-cert", cert.Cert, "-tls-key", cert.Key, "-nowait"}, flags...)
		cmd := batonCmd(t, append(args, "--", "true")...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return ee.ExitCode(), stderr.String()
		case err != nil:
			t.Fatal(err)
		}
		return 0, stderr.String()
	}
	for _, tt := range []struct {
		name  string
		cert  testcerts.Files
		flags []string
		code  int
		err   string
	}{
		{"read-only takes an exclusive claim", p.worker, []string{"conf/db"}, 1, `UNAUTHORIZED: client identity "worker" may not take an exclusive claim on lock "conf/db"`},
		{"read-only takes a slot of 1", p.worker, []string{"-limit", "1", "conf/db"}, 1, `may not take a shared claim with limit 1 on lock "conf/db"`},
		{"read-only reads", p.worker, []string{"-shared", "conf/db"}, 0, ""},
		{"no kinds: every kind", p.worker, []string{"-limit", "3", "jobs/x"}, 0, ""},
		{"no kinds: exclusive", p.worker, []string{"jobs/x"}, 0, ""},
		{"another team writes", p.teamB, []string{"conf/db"}, 0, ""},
		{"another team's name", p.worker, []string{"-shared", "deploy/web"}, 1, `may not acquire lock "deploy/web"`},
	} {
		if code, stderr := run(tt.cert, tt.flags...); code != tt.code || !strings.Contains(stderr, tt.err) {
			t.Errorf("%s: baton run %q: exit %d, stderr %q; want %d and %q", tt.name, tt.flags, code, stderr, tt.code, tt.err)
		}
	}

	// The review's attack: the read-only identity queues a silent shared
	// waiter with limit 1 behind a writer; when it is refused, the readers
	// of another team hold together once the writer is gone.
	clientOf := func(f testcerts.Files) *baton.Client {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := baton.New([]string{sl.Addr}, baton.WithLease(5*time.Second), baton.WithTLSConfig(&tls.Config{RootCAs: p.ca.Pool(),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }}))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	teamB, worker := clientOf(p.teamB), clientOf(p.worker)
	writer, err := teamB.Acquire(ctx, "conf/app")
	if err != nil {
		t.Fatalf("team B's writer: %v", err)
	}
	silent := make(chan error, 1)
	go func() {
		l, err := worker.Acquire(ctx, "conf/app", baton.WithLimit(1))
		if err == nil {
			defer l.Release()
			<-ctx.Done() // waits, then holds, silently: never lets go
		}
		silent <- err
	}()
	select {
	case err := <-silent:
		if !errors.Is(err, baton.ErrUnauthorized) {
			t.Fatalf("the read-only identity's waiter with limit 1: %v, want UNAUTHORIZED", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the read-only identity's waiter with limit 1 was queued, want UNAUTHORIZED at once")
	}
	writer.Release()
	for i := range 2 {
		r, err := teamB.Acquire(ctx, "conf/app", baton.WithShared(true), baton.WithQueueBehindSelf(true))
		if err != nil {
			t.Fatalf("team B's reader %d: %v, want it held beside the others", i+1, err)
		}
		defer r.Release()
	}
}
