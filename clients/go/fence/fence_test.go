package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/fence"
)

// semaphoreSlot is a Holder that says it is a shared claim, as a
// *baton.Lock taken WithLimit does.
type semaphoreSlot struct{ limit int }

func (semaphoreSlot) Name() string  { return "pool" }
func (semaphoreSlot) Token() uint64 { return 7 }
func (semaphoreSlot) Shared() bool  { return true }
func (s semaphoreSlot) Limit() int  { return s.limit }

// TestRefusesWhatNoMarkFences: every kit refuses a shared claim with a
// limit above 1 (ErrShared, pointing at the per-record pattern), token 0
// and an empty name, before it touches the resource; a limit of 1 is a
// mutex and is fenced.
func TestRefusesWhatNoMarkFences(t *testing.T) {
	dir := t.TempDir()
	called := false
	do := func(context.Context, ...any) (any, error) { called = true; return int64(1), nil }
	kits := map[string]func(h fence.Holder) error{
		"Postgres": func(h fence.Holder) error { return fence.Postgres(context.Background(), nil, h) },
		"Redis":    func(h fence.Holder) error { return fence.Redis(context.Background(), do, "m", h) },
		"RedisSet": func(h fence.Holder) error { return fence.RedisSet(context.Background(), do, "m", h, "k", "v") },
		"Header":   func(h fence.Holder) error { _, err := fence.HeaderValue(h); return err },
		"Check":    func(h fence.Holder) error { return fence.Check(filepath.Join(dir, "f"), h) },
		"WriteFile": func(h fence.Holder) error {
			return fence.WriteFile(filepath.Join(dir, "f"), nil, 0o644, h)
		},
	}
	for kit, f := range kits {
		err := f(semaphoreSlot{limit: 3})
		if !errors.Is(err, fence.ErrShared) || !strings.Contains(err.Error(), `lock "pool" is a shared claim with limit 3`) || !strings.Contains(err.Error(), "docs/fencing.md") {
			t.Errorf("%s of a semaphore's slot: %v, want ErrShared naming the limit and the docs", kit, err)
		}
		if err := f(fence.Static("jobs", 0)); err == nil || !strings.Contains(err.Error(), "token 0 is never granted") {
			t.Errorf("%s of token 0: %v", kit, err)
		}
		if err := f(fence.Static("", 5)); err == nil || !strings.Contains(err.Error(), "name is empty") {
			t.Errorf("%s of an empty name: %v", kit, err)
		}
	}
	if called {
		t.Error("a refused Holder reached Redis")
	}
	if _, err := os.Stat(filepath.Join(dir, "f.fence")); !os.IsNotExist(err) {
		t.Errorf("a refused Holder made a sidecar: %v", err)
	}
	if err := fence.Check(filepath.Join(dir, "g"), semaphoreSlot{limit: 1}); err != nil {
		t.Errorf("a shared claim with limit 1 (a mutex): %v", err)
	}
}

// TestHeader: the header's name is percent-encoded so that no lock name
// breaks it, and reads back exactly, at the top of the counter too.
func TestHeader(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"jobs/nightly", "jobs/nightly=18446744073709551615"},
		{"a=b, c", "a%3Db%2C%20c=18446744073709551615"},
		{"naïve\n", "na%C3%AFve%0A=18446744073709551615"},
	} {
		v, err := fence.HeaderValue(fence.Static(c.name, 1<<64-1))
		if err != nil || v != c.value {
			t.Errorf("HeaderValue(%q): %q, %v; want %q", c.name, v, err, c.value)
		}
		got, err := fence.ParseHeader(http.Header{fence.Header: {v}})
		if err != nil || len(got) != 1 || got[0] != (fence.Fence{Lock: c.name, Token: 1<<64 - 1}) {
			t.Errorf("ParseHeader(%q): %+v, %v", v, got, err)
		}
	}
	got, err := fence.ParseHeader(http.Header{fence.Header: {"a=1, b=2", "c=3"}})
	if err != nil || len(got) != 3 || got[2].Lock != "c" {
		t.Errorf("three fences on two lines: %+v, %v", got, err)
	}
	for _, bad := range []string{"jobs", "=5", "jobs=", "jobs=-1", "jobs=0", "jobs=1e3", "jobs=18446744073709551616", "jobs=+5", "%zz=5", "a=1, a=2"} {
		if _, err := fence.ParseHeader(http.Header{fence.Header: {bad}}); err == nil {
			t.Errorf("ParseHeader(%q): no error", bad)
		}
	}
}

type answer struct {
	status int
	body   map[string]string
}

func send(t *testing.T, url string, header ...string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader("x"))
	for _, h := range header {
		req.Header.Add(fence.Header, h)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &a.body)
	return a
}

// TestGuard: the middleware serves a token at least the mark, answers a
// lower one 409 with a JSON body that says why, a bad header 400, and no
// header 428 when Required (else it serves it unfenced); a request with
// several locks is checked for each.
func TestGuard(t *testing.T) {
	served := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })
	srv := httptest.NewServer((&fence.Guard{Store: fence.NewMemoryStore(), Required: true}).Wrap(h))
	defer srv.Close()
	for _, c := range []struct {
		header []string
		status int
		msg    string
	}{
		{[]string{"jobs=18446744073709551614"}, 200, ""},
		{[]string{"jobs=18446744073709551615"}, 200, ""},
		{[]string{"jobs=18446744073709551615"}, 200, ""},
		{[]string{"jobs=18446744073709551614"}, 409, `fence: lock "jobs": stale fencing token 18446744073709551614: token 18446744073709551615 was seen`},
		{[]string{"other=1, jobs=18446744073709551614"}, 409, "stale fencing token"},
		{[]string{"other=1", "jobs=18446744073709551615"}, 200, ""},
		{nil, 428, "needs a Baton-Fence"},
		{[]string{"jobs=x"}, 400, "not a decimal number"},
	} {
		a := send(t, srv.URL, c.header...)
		if a.status != c.status || !strings.Contains(a.body["error"], c.msg) {
			t.Errorf("%v: got %d %v, want %d with %q", c.header, a.status, a.body, c.status, c.msg)
		}
		if c.status == 409 && (a.body["lock"] != "jobs" || a.body["token"] != "18446744073709551614") {
			t.Errorf("%v: the refusal's body %v, want the lock and its token as a string", c.header, a.body)
		}
	}
	if served != 4 {
		t.Errorf("the handler served %d requests, want 4", served)
	}
	open := httptest.NewServer((&fence.Guard{Store: fence.NewMemoryStore()}).Wrap(h))
	defer open.Close()
	if a := send(t, open.URL); a.status != 200 {
		t.Errorf("no header, not Required: %d, want it served", a.status)
	}
}

// TestGuardOneAtATime: the requests of one lock are served one at a
// time, each after its check: a newer request waits while an older one is
// inside (else the older one's handler could write after the newer one's),
// and a stale one that comes meanwhile is refused when its turn comes;
// another lock is not held up.
func TestGuardOneAtATime(t *testing.T) {
	inside := make(chan string)
	leave := make(chan struct{})
	done := make(chan struct{}) // closed when the test ends, early or not
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inside <- r.Header.Get(fence.Header):
		case <-done:
			return
		}
		select {
		case <-leave:
		case <-done:
		}
	})
	srv := httptest.NewServer((&fence.Guard{Store: fence.NewMemoryStore()}).Wrap(h))
	defer srv.Close()
	defer close(done)
	results := make(chan answer, 4)
	go func() { results <- send(t, srv.URL, "jobs=9") }()
	if got := <-inside; got != "jobs=9" {
		t.Fatalf("first inside: %q", got)
	}
	go func() { results <- send(t, srv.URL, "jobs=10") }()
	go func() { results <- send(t, srv.URL, "other=1") }()
	if got := <-inside; got != "other=1" {
		t.Fatalf("%q got in while jobs=9 was inside; want only the other lock's request", got)
	}
	select {
	case got := <-inside:
		t.Fatalf("%q got in while jobs=9 was inside", got)
	case <-time.After(300 * time.Millisecond):
	}
	leave <- struct{}{} // one of the two inside leaves
	leave <- struct{}{} // and the other
	if got := <-inside; got != "jobs=10" {
		t.Fatalf("after jobs=9 left: %q inside, want jobs=10", got)
	}
	go func() { results <- send(t, srv.URL, "jobs=9") }() // waits behind 10, then is stale
	select {
	case got := <-inside:
		t.Fatalf("%q got in while jobs=10 was inside", got)
	case <-time.After(300 * time.Millisecond):
	}
	leave <- struct{}{}
	count := map[int]int{}
	for range 4 {
		count[(<-results).status]++
	}
	if count[200] != 3 || count[409] != 1 {
		t.Fatalf("statuses %v, want three 200 and the stale request's 409", count)
	}
}

// TestTransport: every request through it carries the header, the
// caller's request is left as it was, and a Holder no mark can fence
// fails the request before it is sent.
func TestTransport(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(fence.Header))
		mu.Unlock()
	}))
	defer srv.Close()
	c := &http.Client{Transport: &fence.Transport{Holder: fence.Static("jobs/a b", 1<<63+1)}}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 1 || got[0] != "jobs/a%20b=9223372036854775809" {
		t.Fatalf("the service got %q", got)
	}
	if req.Header.Get(fence.Header) != "" {
		t.Fatal("the caller's request was changed")
	}
	c = &http.Client{Transport: &fence.Transport{Holder: semaphoreSlot{limit: 2}}}
	if _, err := c.Get(srv.URL); !errors.Is(err, fence.ErrShared) {
		t.Fatalf("a semaphore's slot: %v, want ErrShared", err)
	}
	if len(got) != 1 {
		t.Fatal("a refused Holder's request was sent")
	}
}

// TestWriteFile: a write lands by rename; a stale one never does, and
// leaves no temporary file; a file is fenced by one lock only; Check
// raises the mark without writing.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	write := func(token uint64, data string) error {
		return fence.WriteFile(path, []byte(data), 0o640, fence.Static("jobs/x", token))
	}
	if err := write(1<<63+5, "five"); err != nil {
		t.Fatal(err)
	}
	if err := write(1<<63+4, "four"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale write: %v, want ErrStale", err)
	}
	if err := fence.Check(path, fence.Static("jobs/x", 1<<64-1)); err != nil {
		t.Fatal(err)
	}
	if err := write(1<<63+6, "six"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a write below a Check's mark: %v, want ErrStale", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "five" {
		t.Fatalf("the file holds %q, want five", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Fatalf("the file's mode %v, want 0640", fi.Mode())
	}
	side, _ := os.ReadFile(path + fence.SidecarSuffix)
	if string(side) != "jobs/x=18446744073709551615\n" {
		t.Fatalf("the sidecar holds %q", side)
	}
	if err := fence.WriteFile(path, nil, 0o644, fence.Static("other", 1<<64-1)); err == nil || !strings.Contains(err.Error(), `fenced by lock "jobs/x", not "other"`) {
		t.Fatalf("another lock's write: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "out.json out.json.fence" {
		t.Fatalf("the folder holds %v, want the file and its sidecar only", names)
	}
}

// TestWriteFileRace: writers with rising tokens racing on one file: the
// file ends with the highest token's data whatever the order.
func TestWriteFileRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fence.WriteFile(path, []byte{byte('a' + i)}, 0o644, fence.Static("jobs", uint64(100+i)))
			if err != nil && !errors.Is(err, fence.ErrStale) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if b, _ := os.ReadFile(path); string(b) != "p" {
		t.Fatalf("the file holds %q, want p (token 115's)", b)
	}
}
