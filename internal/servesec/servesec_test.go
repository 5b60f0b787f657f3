package servesec

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batonlock/baton/internal/testcerts"
)

// TestLoadErrorsNameTheFlag: a file that cannot be read is refused at
// start with the flag that named it.
func TestLoadErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	srv := ca.Server(t).Write(t, dir, "server")
	missing := filepath.Join(dir, "missing.pem")
	for _, tt := range []struct {
		f    Files
		want string
	}{
		{Files{Cert: srv.Cert, Key: srv.Key, ClientCA: missing}, "tls-client-ca: "},
		{Files{Cert: srv.Cert, Key: missing}, "tls-cert/tls-key: "},
		{Files{OpsCert: srv.Cert, OpsKey: srv.Key, OpsCA: missing}, "ops-tls-client-ca: "},
		{Files{ACL: missing}, "acl-file: "},
	} {
		if _, err := Load(tt.f); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Load(%+v) = %v, want an error starting %q", tt.f, err, tt.want)
		}
	}
}

// TestReloadKeepsWhatFails: a certificate broken on disk is kept as it
// was on SIGHUP, with an error logged; the ops listener's, which loads,
// is replaced.
func TestReloadKeepsWhatFails(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	proto := ca.Server(t).Write(t, dir, "proto")
	opsFiles := ca.Server(t).Write(t, dir, "ops")
	testcerts.WriteFile(t, filepath.Join(dir, "ca.pem"), testcerts.Bundle(ca))
	st, err := Load(Files{Cert: proto.Cert, Key: proto.Key, ClientCA: filepath.Join(dir, "ca.pem"), OpsCert: opsFiles.Cert, OpsKey: opsFiles.Key})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.LogAttrs(), []any{"tls", "mutual", "ops_tls", "on"}; !slices.Equal(got, want) {
		t.Errorf("LogAttrs() = %v, want %v", got, want)
	}
	before := st.ProtoTLS().Leaf()
	if err := os.WriteFile(proto.Cert, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca.Server(t).Write(t, dir, "ops")
	var logs bytes.Buffer
	st.Reload(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	out := logs.String()
	for _, want := range []string{"reload failed; keeping the protocol TLS files in use", "tls-cert/tls-key/tls-client-ca", "reloaded on SIGHUP", "files=[ops-tls]", "failed=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("reload log lacks %q:\n%s", want, out)
		}
	}
	if !st.ProtoTLS().Leaf().Equal(before) {
		t.Error("the protocol listener's certificate changed although its new file does not load")
	}
}
