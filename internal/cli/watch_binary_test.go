package cli

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
)

// TestBinaryWatchHTTPSHint: baton watch given an HTTPS ops port in plain
// HTTP says what baton locks says: give -tls-ca.
func TestBinaryWatchHTTPSHint(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-tls-cert", p.server.Cert, "-tls-key", p.server.Key, "-log-format=json")
	sl := waitServing(t, startLogged(t, serve).next)
	const hint = "speaks HTTPS: give -tls-ca"
	for _, cmd := range []string{"locks", "watch"} {
		code, out := batonOut(t, cmd, "-ops-addr", sl.OpsAddr)
		if code != 1 || !strings.Contains(out, hint) {
			t.Errorf("baton %s -ops-addr %s (HTTPS): exit %d, %q; want exit 1 and %q", cmd, sl.OpsAddr, code, out, hint)
		}
	}
}

// TestBinaryWatchServerStopping: while the server shuts down (its ops
// listener lingers for 3s, answering), baton watch says that the server
// is shutting down and backs off, instead of reconnecting every 100ms.
func TestBinaryWatchServerStopping(t *testing.T) {
	t.Parallel()
	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=3s", "-log-format=json")
	logs := startLogged(t, serve)
	sl := waitServing(t, logs.next)
	w := startBaton(t, "watch", "-ops-addr", sl.OpsAddr)
	batontest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(w.stderr.String(), "following changes") }, "baton watch following the stream")
	serve.Process.Signal(syscall.SIGTERM)
	logs.drain(t) // the server has exited: the linger is over
	w.cmd.Process.Signal(syscall.SIGTERM)
	w.wait(t)
	out := w.stderr.String()
	n := strings.Count(out, "reconnecting in")
	if !strings.Contains(out, "is shutting down; reconnecting in 1s") || n > 6 {
		t.Errorf("baton watch through a 3s shutdown: %d reconnections:\n%s\nwant \"the server ... is shutting down; reconnecting in 1s\" and a growing wait (at most 6 lines)", n, out)
	}
}
