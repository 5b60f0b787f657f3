package ops_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// fakeBackend is an in-memory lock table, enough to drive every answer of the API.
type fakeBackend struct {
	mu    sync.Mutex
	ready bool
	locks map[string]*server.LockView
	err   error // if set, the admin calls fail with it
}

func (f *fakeBackend) Ready() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

func (f *fakeBackend) setReady(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = v
}

func (f *fakeBackend) Locks() []server.LockView {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []server.LockView // nil when empty, as a real snapshot may be
	for _, name := range slices.Sorted(maps.Keys(f.locks)) {
		out = append(out, copyLock(f.locks[name]))
	}
	return out
}

func (f *fakeBackend) Lock(name string) (server.LockView, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.locks[name]
	if !ok {
		return server.LockView{}, false
	}
	return copyLock(l), true
}

func (f *fakeBackend) ForceReleaseAll(name string) ([]server.SessionView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	l, ok := f.locks[name]
	if !ok || l.Holder == nil {
		return nil, server.ErrNotHeld
	}
	if len(l.Holders) > 1 { // several shared holders: all end, nobody is promoted here
		ended := l.Holders
		l.Holder, l.Holders = nil, nil
		if len(l.Waiters) == 0 {
			delete(f.locks, name)
		}
		return ended, nil
	}
	ended := *l.Holder
	l.Holder = nil
	if len(l.Waiters) > 0 {
		next := l.Waiters[0]
		l.Waiters = l.Waiters[1:]
		next.Held, next.Token, next.Since = true, ended.Token+1, 0
		l.Holder = &next
	}
	if l.Holder == nil && len(l.Waiters) == 0 {
		delete(f.locks, name)
	}
	return []server.SessionView{ended}, nil
}

// ReleaseSessionIf ends one holder of a lock with several (a lone holder
// goes as ForceReleaseAll's).
func (f *fakeBackend) ReleaseSessionIf(id string, allow func(lock string) error) (server.SessionView, error) {
	f.mu.Lock()
	if f.err != nil {
		f.mu.Unlock()
		return server.SessionView{}, f.err
	}
	for name, l := range f.locks {
		for _, w := range l.Waiters {
			if w.ID == id {
				f.mu.Unlock()
				return server.SessionView{}, server.ErrWaiter
			}
		}
		for i, h := range l.Holders {
			if h.ID != id {
				continue
			}
			if allow != nil {
				if err := allow(name); err != nil {
					f.mu.Unlock()
					return server.SessionView{}, err
				}
			}
			l.Holders = slices.Delete(slices.Clone(l.Holders), i, i+1)
			if len(l.Holders) > 0 {
				l.Holder = &l.Holders[0]
			} else {
				l.Holder = nil
			}
			f.mu.Unlock()
			return h, nil
		}
		if l.Holder != nil && l.Holder.ID == id {
			if allow != nil {
				if err := allow(name); err != nil {
					f.mu.Unlock()
					return server.SessionView{}, err
				}
			}
			f.mu.Unlock()
			ended, err := f.ForceReleaseAll(name)
			if err != nil {
				return server.SessionView{}, err
			}
			return ended[0], nil
		}
	}
	f.mu.Unlock()
	return server.SessionView{}, server.ErrUnknownSession
}

func (f *fakeBackend) KickIf(id string, allow func(lock string) error) (server.SessionView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return server.SessionView{}, f.err
	}
	for name, l := range f.locks {
		if l.Holder != nil && l.Holder.ID == id {
			if allow != nil {
				if err := allow(name); err != nil {
					return server.SessionView{}, err
				}
			}
			return server.SessionView{}, server.ErrHolder
		}
		for i, w := range l.Waiters {
			if w.ID == id {
				if allow != nil {
					if err := allow(name); err != nil {
						return server.SessionView{}, err
					}
				}
				l.Waiters = slices.Delete(l.Waiters, i, i+1)
				if l.Holder == nil && len(l.Waiters) == 0 {
					delete(f.locks, name)
				}
				return w, nil
			}
		}
	}
	return server.SessionView{}, server.ErrUnknownSession
}

func (f *fakeBackend) add(l server.LockView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.locks[l.Name] = &l
}

func copyLock(l *server.LockView) server.LockView {
	c := server.LockView{Name: l.Name, Limit: l.Limit, Waiters: slices.Clone(l.Waiters), Holders: slices.Clone(l.Holders)}
	if l.Holder != nil {
		h := *l.Holder
		c.Holder = &h
	}
	return c
}

func holder(id, owner string, token uint64) *server.SessionView {
	return &server.SessionView{
		ID: id, Remote: "127.0.0.1:5" + id, Owner: owner, Lease: 2 * time.Second,
		Held: true, Token: token, Since: 1234*time.Millisecond + 900*time.Microsecond, Silent: 12 * time.Millisecond,
	}
}

func waiter(id, owner string) server.SessionView {
	return server.SessionView{
		ID: id, Remote: "127.0.0.1:5" + id, Owner: owner, Lease: 1500 * time.Millisecond,
		Since: 300 * time.Millisecond, Silent: 5 * time.Millisecond,
	}
}

// newFake returns a ready backend holding:
//
//	jobs: holder 1 (token 7), waiters 2 and 3
//	queue: no holder at this instant, waiter 4
//	solo: holder 5 (token 3), no waiters
func newFake() *fakeBackend {
	f := &fakeBackend{ready: true, locks: map[string]*server.LockView{}}
	f.add(server.LockView{Name: "jobs", Holder: holder("1", "alice", 7),
		Waiters: []server.SessionView{waiter("2", "bob"), waiter("3", "carol")}})
	f.add(server.LockView{Name: "queue", Waiters: []server.SessionView{waiter("4", "dave")}})
	f.add(server.LockView{Name: "solo", Holder: holder("5", "erin", 3)})
	return f
}

// setup serves cfg (Backend newFake() unless set) over loopback HTTP.
func setup(t *testing.T, cfg ops.Config) (*httptest.Server, *fakeBackend) {
	t.Helper()
	if cfg.Backend == nil {
		cfg.Backend = newFake()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv := httptest.NewServer(ops.NewHandler(cfg))
	t.Cleanup(func() {
		srv.Client().CloseIdleConnections()
		srv.Close()
	})
	f, _ := cfg.Backend.(*fakeBackend)
	return srv, f
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends method path (already percent-encoded as it should go on the
// wire) with an optional Authorization value and body.
func do(t *testing.T, srv *httptest.Server, method, path, auth, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("NewRequest %s %s: %v", method, path, err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// object decodes a JSON object answer, failing the test if it is not one.
func object(t *testing.T, r response) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type: got %q, want application/json (body %q)", ct, r.body)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("body %q: not a JSON object: %v", r.body, err)
	}
	return m
}

// errorMessage checks that r is exactly {"error": "..."} and returns the message.
func errorMessage(t *testing.T, r response) string {
	t.Helper()
	m := object(t, r)
	msg, ok := m["error"].(string)
	if len(m) != 1 || !ok || msg == "" {
		t.Fatalf("error body: got %s, want {\"error\": \"<message>\"}", r.body)
	}
	return msg
}

func keys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

func testRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_ops_test_total", Help: "A counter for the ops tests."})
	reg.MustRegister(c)
	c.Add(3)
	return reg
}
