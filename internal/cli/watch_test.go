//go:build unix

package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/ops"
)

// cuttableOps serves the ops API and can end the open event streams, as a
// dropped connection would; it records each stream request's Last-Event-ID.
type cuttableOps struct {
	mu      sync.Mutex
	cuts    []context.CancelFunc
	resumes []string
}

func (c *cuttableOps) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			ctx, cancel := context.WithCancel(r.Context())
			c.mu.Lock()
			c.cuts = append(c.cuts, cancel)
			c.mu.Unlock()
			r = r.WithContext(ctx)
			// The stream is subscribed once its header is written.
			w = &headerHook{ResponseWriter: w, hook: func() {
				c.mu.Lock()
				c.resumes = append(c.resumes, r.Header.Get("Last-Event-ID"))
				c.mu.Unlock()
			}}
		}
		h.ServeHTTP(w, r)
	})
}

type headerHook struct {
	http.ResponseWriter
	hook func()
}

func (h *headerHook) WriteHeader(code int) {
	h.hook()
	h.ResponseWriter.WriteHeader(code)
}

func (h *headerHook) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (c *cuttableOps) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.cuts {
		f()
	}
	c.cuts = nil
}

func (c *cuttableOps) streams() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.resumes...)
}

func startCuttableOps(t *testing.T, srv *batontest.Server, token string) (string, *cuttableOps) {
	t.Helper()
	cut := &cuttableOps{}
	hs := httptest.NewServer(cut.wrap(ops.NewHandler(ops.Config{Backend: srv.Srv, AdminToken: token,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})))
	t.Cleanup(hs.Close)
	return strings.TrimPrefix(hs.URL, "http://"), cut
}

// startWatch runs baton watch in-process until t ends.
func startWatch(t *testing.T, env map[string]string, args ...string) (stdout, stderr *batontest.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = new(batontest.SyncBuffer), new(batontest.SyncBuffer)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"watch"}, args...), &sys{stdout: stdout, stderr: stderr, lookupEnv: fakeEnv(env)})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("baton watch exited %d after interrupt, want 0 (stderr %q)", code, stderr.String())
		}
	})
	return stdout, stderr
}

func TestWatchJSONResumesAfterADrop(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	addr, cut := startCuttableOps(t, srv, "tok")
	stdout, stderr := startWatch(t, map[string]string{"BATON_ADMIN_TOKEN": "tok"}, "-json", "-ops-addr", addr, "jobs/a")
	batontest.Eventually(t, 5*time.Second, func() bool { return len(cut.streams()) == 1 }, "watch did not connect")

	l := holdLock(t, srv.Addr, "jobs/a", "first")
	holdLock(t, srv.Addr, "jobs/other", "filtered-out")
	batontest.Eventually(t, 5*time.Second, func() bool { return len(lines(stdout.String())) == 1 }, "no granted line")
	cut.cut()
	l.Release() // while the stream is down, or just back: either way it must show once
	batontest.Eventually(t, 5*time.Second, func() bool { _, held := srv.Srv.Lock("jobs/a"); return !held }, "jobs/a still held")
	holdLock(t, srv.Addr, "jobs/a", "second")
	batontest.Eventually(t, 5*time.Second, func() bool { return len(lines(stdout.String())) == 3 }, "want 3 events, got %q (stderr %q, streams %q)", stdout.String(), stderr.String(), cut.streams())

	var got []string
	var prev uint64
	for _, line := range lines(stdout.String()) {
		var e opsclient.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q is not an EVENT: %v", line, err)
		}
		if e.Lock != "jobs/a" || e.Seq <= prev {
			t.Fatalf("event %+v after seq %d: want jobs/a in rising order", e, prev)
		}
		prev = e.Seq
		got = append(got, e.Type+":"+e.Session.Owner)
	}
	if strings.Join(got, " ") != "granted:first released:first granted:second" {
		t.Fatalf("events %q", got)
	}
	// Ids are the server's run, a dash, and the sequence number: the
	// second stream resumes after the last event the first delivered (the
	// grant, or the release too if it got through before the cut landed).
	if s := cut.streams(); len(s) < 2 || s[0] != "" || !regexp.MustCompile(`^[0-9a-f]+-[13]$`).MatchString(s[1]) {
		t.Fatalf("Last-Event-ID of the streams: %q, want none then RUN-1 (or RUN-3)", s)
	}
}

func TestWatchLinesAndErrors(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	addr, cut := startCuttableOps(t, srv, "tok")
	holdLock(t, srv.Addr, "jobs/before", "early@host")
	stdout, watchErr := startWatch(t, map[string]string{"BATON_ADMIN_TOKEN": "tok"}, "-ops-addr", addr)
	batontest.Eventually(t, 5*time.Second, func() bool { return len(cut.streams()) == 1 }, "watch did not connect")
	// It starts by saying what is held already.
	batontest.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(watchErr.String(), "now 1 lock held or waited for, 0 sessions waiting")
	}, "no start line: %q", watchErr.String())
	holdLock(t, srv.Addr, "deploy/web", "ci@runner-3")
	batontest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(stdout.String(), "granted") }, "no line")
	line := lines(stdout.String())[0]
	for _, want := range []string{"granted", "deploy/web", "owner=ci@runner-3", "session=", "token=", "remote=127.0.0.1:"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut batontest.SyncBuffer
	code := run(ctx, []string{"watch", "-ops-addr", addr}, &sys{stdout: &out, stderr: &errOut, lookupEnv: fakeEnv(nil)})
	stderr := errOut.String()
	if code != exitFailure || !strings.Contains(stderr, "unauthorized") {
		t.Errorf("watch without a token: exit %d, stderr %q; want 1 and unauthorized", code, stderr)
	}
	code, _, stderr = runCLI(t, nil, "watch", "a", "b")
	if code != exitUsage || !strings.Contains(stderr, `unexpected argument "b"`) {
		t.Errorf("watch a b: exit %d, stderr %q", code, stderr)
	}
}

// TestWatchOutlivesAChangeOfLeader: while a cluster elects a leader, the
// ops API of a follower answers 503 ("no leader is known"); baton watch
// waits and reconnects, as it does after a dropped stream, instead of
// exiting: a change of leader must not end a watch.
func TestWatchOutlivesAChangeOfLeader(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	cut := &cuttableOps{}
	var refusing sync.Mutex
	refuse, refused := 0, 0
	h := cut.wrap(ops.NewHandler(ops.Config{Backend: srv.Srv, AdminToken: "tok",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refusing.Lock()
		no := r.URL.Path == "/v1/events" && refuse > 0
		if no {
			refuse--
			refused++
		}
		refusing.Unlock()
		if no {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"no leader is known: the cluster is electing one, or has no quorum"}`)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	addr := strings.TrimPrefix(hs.URL, "http://")
	stdout, stderr := startWatch(t, map[string]string{"BATON_ADMIN_TOKEN": "tok"}, "-ops-addr", addr)
	batontest.Eventually(t, 5*time.Second, func() bool { return len(cut.streams()) == 1 }, "watch did not connect")
	refusing.Lock()
	refuse = 3
	refusing.Unlock()
	cut.cut()
	batontest.Eventually(t, 10*time.Second, func() bool {
		refusing.Lock()
		defer refusing.Unlock()
		return refused == 3
	}, "baton watch did not ask three times after the cut (stderr %q)", stderr.String())
	holdLock(t, srv.Addr, "after/election", "back")
	batontest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(stdout.String(), "after/election") },
		"baton watch did not come back after three 503 answers: stdout %q, stderr %q", stdout.String(), stderr.String())
	if n := strings.Count(stderr.String(), "answered 503: no leader is known"); n != 3 {
		t.Errorf("stderr says %d times that no leader is known, want 3:\n%s", n, stderr.String())
	}
}
