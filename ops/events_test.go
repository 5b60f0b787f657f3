package ops_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// sseEvent is one event of a Server-Sent Events stream.
type sseEvent struct {
	ID, Type, Data string
}

// sseStream reads a /v1/events answer in the background.
type sseStream struct {
	resp   *http.Response
	events chan sseEvent
	done   chan struct{}
	last   string // the id of the last event next returned
}

// lastID is the id of the last event read, for a Last-Event-ID.
func (s *sseStream) lastID(t *testing.T) string {
	t.Helper()
	if s.last == "" {
		t.Fatal("no event read yet")
	}
	return s.last
}

func openStream(t *testing.T, url string, header http.Header) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	s := &sseStream{resp: resp, events: make(chan sseEvent, 100000), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.Type != "" {
					s.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				e.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.Type = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.Data = line[6:]
			}
		}
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-s.done })
	return s
}

func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			t.Fatal("event stream ended, want an event")
		}
		if e.ID != "" {
			s.last = e.ID
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	panic("unreachable")
}

type eventData struct {
	Seq     uint64 `json:"seq"`
	At      string `json:"at"`
	Type    string `json:"type"`
	Lock    string `json:"lock"`
	Session struct {
		ID    string  `json:"id"`
		Owner string  `json:"owner"`
		Token *uint64 `json:"token"`
	} `json:"session"`
	Locks []struct {
		Name string `json:"name"`
	} `json:"locks"`
}

func (s *sseStream) expect(t *testing.T, typ, lock string) eventData {
	t.Helper()
	e := s.next(t)
	var d eventData
	if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
		t.Fatalf("event %s: bad JSON %q: %v", e.Type, e.Data, err)
	}
	if e.Type != typ || (lock != "" && d.Lock != lock) {
		t.Fatalf("got event %s %q (%s), want %s %q", e.Type, d.Lock, e.Data, typ, lock)
	}
	if e.ID == "" {
		t.Fatalf("event %s has no id", e.Type)
	}
	return d
}

// startEvents starts a real lock server and the ops API over it.
func startEvents(t *testing.T, cfg ops.Config, wrap func(http.Handler) http.Handler, mutate ...func(*server.Config)) (*batontest.Server, *httptest.Server) {
	t.Helper()
	ts := batontest.StartServer(t, mutate...)
	cfg.Backend = ts.Srv
	cfg.Gatherer = ts.Srv.Registry()
	var h http.Handler = ops.NewHandler(cfg)
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return ts, hs
}

func holdLock(t *testing.T, ts *batontest.Server, name string) *batontest.Conn {
	t.Helper()
	c := batontest.Dial(t, ts.Addr)
	c.Acquire(name, time.Minute, false, "owner:"+name)
	c.ReadFrame(5 * time.Second)
	return c
}

func TestEventStreamFilterAndTypes(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	all := openStream(t, hs.URL+"/v1/events", nil)
	onlyA := openStream(t, hs.URL+"/v1/events?lock=a%2Fb", nil)

	a := holdLock(t, ts, "a/b")
	b := holdLock(t, ts, "other")
	a.Conn.Close()

	g := all.expect(t, "granted", "a/b")
	if g.Session.Owner != "owner:a/b" || g.Session.Token == nil || g.Seq != 1 {
		t.Fatalf("granted event %+v: want owner, token and seq 1", g)
	}
	if _, err := time.Parse(time.RFC3339Nano, g.At); err != nil {
		t.Fatalf("at %q is not RFC 3339: %v", g.At, err)
	}
	all.expect(t, "granted", "other")
	all.expect(t, "released", "a/b")
	onlyA.expect(t, "granted", "a/b")
	if r := onlyA.expect(t, "released", "a/b"); r.Seq != 3 {
		t.Fatalf("filtered release has seq %d, want 3 (the stream's own numbering)", r.Seq)
	}
	b.Conn.Close()
	all.expect(t, "released", "other")
	select {
	case e := <-onlyA.events:
		t.Fatalf("filtered stream got %+v", e)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestEventStreamResumeSnapshotResync(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	a := holdLock(t, ts, "r")
	a.Conn.Close()
	batontest.Eventually(t, 5*time.Second, func() bool { _, ok := ts.Srv.Lock("r"); return !ok }, "r still held")
	holdLock(t, ts, "s") // seq 3

	// Resume after 1 by header: the release of r, then the grant of s.
	s := openStream(t, hs.URL+"/v1/events", http.Header{"Last-Event-Id": {"1"}})
	s.expect(t, "released", "r")
	s.expect(t, "granted", "s")
	// The same by query, for tools without headers.
	s = openStream(t, hs.URL+"/v1/events?since=2", nil)
	s.expect(t, "granted", "s")

	// A snapshot first, when asked, with the seq it stands for.
	s = openStream(t, hs.URL+"/v1/events?snapshot=1", nil)
	snap := s.expect(t, "snapshot", "")
	if snap.Seq != 3 || len(snap.Locks) != 1 || snap.Locks[0].Name != "s" {
		t.Fatalf("snapshot %+v, want seq 3 with lock s", snap)
	}
	// With the latest events before it, for a view of what just happened.
	s = openStream(t, hs.URL+"/v1/events?snapshot=1&history=2", nil)
	s.expect(t, "snapshot", "")
	if h := s.next(t); h.Type != "history" || !strings.Contains(h.Data, `"seq":2,`) || !strings.Contains(h.Data, `"seq":3,`) || strings.Contains(h.Data, `"seq":1,`) {
		t.Fatalf("history event %+v, want events 2 and 3", h)
	}
	// A seq the history does not hold: resync with the state.
	s = openStream(t, hs.URL+"/v1/events?since=999", nil)
	if rs := s.expect(t, "resync", ""); rs.Seq != 3 || len(rs.Locks) != 1 {
		t.Fatalf("resync %+v, want seq 3 with lock s", rs)
	}
	holdLock(t, ts, "t")
	s.expect(t, "granted", "t")

	for _, bad := range []string{"?since=x", "?lock=", "?snapshot=maybe", "?history=-1", "?history=10001", "?history=x"} {
		resp, err := http.Get(hs.URL + "/v1/events" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /v1/events%s: %s, want 400", bad, resp.Status)
		}
	}
}

// stallingWriter blocks every write of the stream after the first until
// released, like a client that stopped reading.
type stallingWriter struct {
	http.ResponseWriter
	once    sync.Once
	stalled chan struct{} // closed at the first stalled write
	release chan struct{}
	mu      sync.Mutex
	out     strings.Builder
	writes  int
}

func (w *stallingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	n := w.writes
	w.out.Write(b)
	w.mu.Unlock()
	if n > 1 {
		w.once.Do(func() { close(w.stalled) })
		<-w.release
	}
	return w.ResponseWriter.Write(b)
}

// Flush, and no Unwrap: the server cannot set write deadlines through a
// stallingWriter, so the stall lasts as long as the test needs on a slow
// machine (the 10 s write bound would end the stream before the overflow).
func (w *stallingWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

func TestEventStreamCutsSlowConsumer(t *testing.T) {
	sw := &stallingWriter{stalled: make(chan struct{}), release: make(chan struct{})}
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("stall") != "" {
				sw.ResponseWriter = w
				w = sw
			}
			h.ServeHTTP(w, r)
		})
	}
	ts, hs := startEvents(t, ops.Config{}, wrap)
	slow := openStream(t, hs.URL+"/v1/events?stall=1", nil)
	fast := openStream(t, hs.URL+"/v1/events", nil)

	// The first event's write stalls; the server goes on past a whole
	// history of events, which the fast client gets in full.
	c := holdLock(t, ts, "first")
	fast.expect(t, "granted", "first")
	<-sw.stalled
	c.Conn.Close()
	fast.expect(t, "released", "first")
	sessions := churn(t, ts, server.EventHistory/2+10)
	for range 2 * sessions {
		fast.next(t)
	}
	close(sw.release)
	var types []string
	for e := range slow.events {
		types = append(types, e.Type)
	}
	if len(types) == 0 || types[len(types)-1] != "overflow" || len(types) > server.EventHistory {
		t.Fatalf("slow client got %d events (last ones %q), want some and then overflow", len(types), types[max(0, len(types)-3):])
	}
}

// churn makes at least n sessions, each a grant and a release, 500 at a
// time on 500 locks; it returns how many it made.
func churn(t *testing.T, ts *batontest.Server, n int) int {
	t.Helper()
	made := 0
	for made < n {
		conns := make([]*batontest.Conn, 500)
		for i := range conns {
			conns[i] = batontest.Dial(t, ts.Addr)
			conns[i].Acquire(fmt.Sprintf("churn-%d", i), time.Minute, false, "")
		}
		for _, c := range conns {
			c.ReadFrame(5 * time.Second)
			c.Conn.Close()
		}
		made += len(conns)
		batontest.Eventually(t, 10*time.Second, func() bool { return len(ts.Srv.Locks()) == 0 }, "churn locks still held")
	}
	return made
}

func TestEventStreamAuth(t *testing.T) {
	_, hs := startEvents(t, ops.Config{AdminToken: "s3cret"}, nil)
	resp, err := http.Get(hs.URL + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/events without a token: %s, want 401", resp.Status)
	}
	openStream(t, hs.URL+"/v1/events?snapshot=1", http.Header{"Authorization": {"Bearer s3cret"}}).expect(t, "snapshot", "")
}

func TestEventStreamEndsAtShutdown(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	s := openStream(t, hs.URL+"/v1/events", nil)
	ts.Stop(t)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open 5s after Shutdown")
	}
}

// TestEventStreamEveryType: each of the seven EVENT types comes through
// the HTTP stream from real sessions and the real admin endpoints, in
// order, with seq rising by one.
func TestEventStreamEveryType(t *testing.T) {
	ts, hs := startEvents(t, ops.Config{}, nil)
	s := openStream(t, hs.URL+"/v1/events", nil)
	post := func(path string) {
		t.Helper()
		resp, err := http.Post(hs.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
	}
	var seq uint64
	check := func(typ, lock, owner string) {
		t.Helper()
		e := s.expect(t, typ, lock)
		if e.Session.Owner != owner || (seq != 0 && e.Seq != seq+1) {
			t.Fatalf("%s %s: owner %q seq %d, want owner %q seq %d", typ, lock, e.Session.Owner, e.Seq, owner, seq+1)
		}
		seq = e.Seq
	}
	holdLock(t, ts, "k")
	check("granted", "k", "owner:k")
	var waiters []*batontest.Conn
	for _, owner := range []string{"w1", "w2", "w3"} { // w1 leaves, w2 is kicked, w3 is promoted
		w := batontest.Dial(t, ts.Addr)
		w.Acquire("k", time.Minute, false, owner)
		check("queued", "k", owner)
		waiters = append(waiters, w)
	}
	silent := batontest.Dial(t, ts.Addr) // never a heartbeat
	silent.Acquire("e", 300*time.Millisecond, false, "silent")
	check("granted", "e", "silent")
	check("expired", "e", "silent")
	waiters[0].Conn.Close()
	check("left", "k", "w1")
	l, _ := ts.Srv.Lock("k")
	post("/v1/sessions/" + l.Waiters[0].ID + "/kick")
	check("kicked", "k", "w2")
	post("/v1/locks/k/release")
	check("force_released", "k", "owner:k")
	check("granted", "k", "w3")
	waiters[2].Conn.Close()
	check("released", "k", "w3")
}
