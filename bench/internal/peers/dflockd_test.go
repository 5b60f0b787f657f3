package peers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/internal/system"
)

// fakeDflockd is a server of dflockd's line protocol in this process: it
// answers each request with answer(cmd, key, arg); an empty answer is
// none (the request waits until its connection closes).
type fakeDflockd struct {
	addr        string
	connections atomic.Int64 // accepted so far
	closed      chan struct{}
}

func startFakeDflockd(t *testing.T, answer func(cmd, key, arg string) string) *fakeDflockd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDflockd{addr: ln.Addr().String(), closed: make(chan struct{}, 100)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			f.connections.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() {
				defer func() { f.closed <- struct{}{} }()
				r := bufio.NewReader(conn)
				for {
					var lines [3]string
					for i := range lines {
						l, err := r.ReadString('\n')
						if err != nil {
							return
						}
						lines[i] = strings.TrimSuffix(l, "\n")
					}
					a := answer(lines[0], lines[1], lines[2])
					if a == "" {
						r.ReadByte() // until the client closes
						return
					}
					if _, err := conn.Write([]byte(a + "\n")); err != nil {
						return
					}
				}
			})
		}
	})
	return f
}

// TestDflockdProtocol: the requests the adapter writes and how it reads
// each answer, against a fake server.
func TestDflockdProtocol(t *testing.T) {
	var (
		mu       sync.Mutex
		requests []string
		slAnswer = []string{"timeout", "ok tok1 10"}
	)
	f := startFakeDflockd(t, func(cmd, key, arg string) string {
		mu.Lock()
		defer mu.Unlock()
		requests = append(requests, cmd+"|"+key+"|"+arg)
		switch cmd {
		case "sl":
			a := slAnswer[0]
			if len(slAnswer) > 1 {
				slAnswer = slAnswer[1:]
			}
			return a
		case "sr":
			return "ok"
		}
		return "error"
	})
	for _, keep := range []bool{false, true} {
		f.connections.Store(0)
		mu.Lock()
		requests, slAnswer = nil, []string{"timeout", "ok tok1 10"}
		mu.Unlock()
		sys := NewDflockd(f.addr, DflockdOptions{KeepConnection: keep})
		c, err := sys.NewSlotClient(t.Context(), 0, 4)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			lockWithin(t, c, "pool")
			unlockWithin(t, c, "pool")
		}
		c.Close()
		mu.Lock()
		// A timed-out sl is asked again; sr carries the token granted.
		want := []string{"sl|/baton-bench/pool|60 4 10", "sl|/baton-bench/pool|60 4 10", "sr|/baton-bench/pool|tok1",
			"sl|/baton-bench/pool|60 4 10", "sr|/baton-bench/pool|tok1"}
		if strings.Join(requests, " ") != strings.Join(want, " ") {
			t.Errorf("keep %v: requests\n%v\nwant\n%v", keep, requests, want)
		}
		mu.Unlock()
		// dflockd's Semaphore type dials per claim; the low-level way
		// keeps one connection.
		if n, want := f.connections.Load(), map[bool]int64{false: 2, true: 1}[keep]; n != want {
			t.Errorf("keep %v: %d connections for two claims, want %d", keep, n, want)
		}
	}
}

// TestDflockdAnswers: each answer that is not a grant is an error that
// quotes it, and leaves the client able to ask again.
func TestDflockdAnswers(t *testing.T) {
	for _, tc := range []struct {
		sl, sr string
		want   string
	}{
		{sl: "error_limit_mismatch", want: "another limit (error_limit_mismatch)"},
		{sl: "error_max_locks", want: `server answered "error_max_locks"`},
		{sl: "ok tok", want: `server answered "ok tok", want "ok TOKEN LEASE"`},
		{sl: "ok tok ten", want: `server answered "ok tok ten"`},
		{sl: strings.Repeat("x", 70<<10), want: "reply longer than"},
		{sl: "ok tok 10", sr: "error", want: `dflockd sr "pool": server answered "error", want ok`},
	} {
		f := startFakeDflockd(t, func(cmd, _, _ string) string {
			if cmd == "sl" {
				return tc.sl
			}
			return tc.sr
		})
		c, err := NewDflockd(f.addr, DflockdOptions{KeepConnection: true}).NewSlotClient(t.Context(), 0, 4)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Lock(t.Context(), "pool")
		if err == nil {
			err = c.Unlock(t.Context(), "pool")
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sl %q, sr %q: error %v, want %q", clip(tc.sl), tc.sr, err, tc.want)
		}
		if tc.sr == "" {
			if err := c.Lock(t.Context(), "pool"); err == nil {
				t.Errorf("sl %q: a second Lock succeeded", clip(tc.sl))
			}
		}
		c.Close()
	}
}

// TestDflockdCancel: a waiter whose ctx ends returns ctx's error at once
// and closes its connection, which is how dflockd learns to drop it.
func TestDflockdCancel(t *testing.T) {
	f := startFakeDflockd(t, func(cmd, _, _ string) string { return "" })
	c, err := NewDflockd(f.addr, DflockdOptions{KeepConnection: true}).NewSlotClient(t.Context(), 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() // ends a Lock that ignored its ctx
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	locked := make(chan error, 1)
	go func() { locked <- c.Lock(ctx, "pool") }()
	select {
	case err := <-locked:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock: %v, want the deadline", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("Lock still waiting %v after its deadline of 100ms", waitLimit)
	}
	select {
	case <-f.closed:
	case <-time.After(waitLimit):
		t.Fatal("the server never saw the waiter's connection close")
	}
}

func TestDflockdSlotClientLimit(t *testing.T) {
	if _, err := NewDflockd("127.0.0.1:1", DflockdOptions{}).NewSlotClient(t.Context(), 0, 0); err == nil || !strings.Contains(err.Error(), "limit 0") {
		t.Errorf("limit 0: %v, want it refused", err)
	}
}

// TestFindDflockd: the flag, then the variable, then PATH; a name that is
// not an executable file, or none at all, says how to get dflockd.
func TestFindDflockd(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "dflockd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv(DflockdEnv, "")
	if got, err := FindDflockd(""); err != nil || got != bin {
		t.Errorf("on PATH: %q, %v; want %q", got, err, bin)
	}
	t.Setenv(DflockdEnv, plain)
	for _, tc := range []struct{ flag, want string }{
		{"", "$" + DflockdEnv + " " + plain + ": not an executable file"},
		{dir, "-dflockd " + dir + ": not an executable file"},
		{filepath.Join(dir, "none"), "no such file"},
	} {
		_, err := FindDflockd(tc.flag)
		if err == nil || !errors.Is(err, system.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), DflockdHowTo) {
			t.Errorf("FindDflockd(%q): %v, want unavailable, %q and how to get it", tc.flag, err, tc.want)
		}
	}
	t.Setenv(DflockdEnv, "")
	t.Setenv("PATH", t.TempDir())
	if _, err := FindDflockd(""); err == nil || !strings.Contains(err.Error(), "not on PATH") || !strings.Contains(err.Error(), DflockdHowTo) {
		t.Errorf("nowhere: %v, want how to get it", err)
	}
}

// TestStartDflockdFails: a binary that exits at once is reported with
// what it wrote; it was given the address on its command line, and none
// of the caller's DFLOCKD_* variables, which would override it.
func TestStartDflockdFails(t *testing.T) {
	t.Setenv("DFLOCKD_PORT", "6388")
	bin := filepath.Join(t.TempDir(), "dflockd")
	script := "#!/bin/sh\necho \"configuration error: $* (DFLOCKD_PORT ${DFLOCKD_PORT:-unset})\" >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := StartDflockd(t.Context(), bin)
	want := regexp.MustCompile(`exited before serving: configuration error: --host 127\.0\.0\.1 --port \d+ \(DFLOCKD_PORT unset\)`)
	if err == nil || !want.MatchString(err.Error()) {
		t.Errorf("StartDflockd: %v, want %s", err, want)
	}
}

// realDflockd starts the dflockd binary FindDflockd finds, or skips the
// test saying how to get one.
func realDflockd(t *testing.T) *DflockdServer {
	t.Helper()
	bin, err := FindDflockd("")
	if err != nil {
		t.Skip(err)
	}
	srv, err := StartDflockd(t.Context(), bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

// dflockdSemaphore is what dflockd's stats command says of one semaphore.
type dflockdSemaphore struct{ Holders, Waiters int }

func dflockdStats(t *testing.T, addr, name string) dflockdSemaphore {
	t.Helper()
	c, err := dialDflockd(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.conn.Close()
	reply, err := c.roundTrip(t.Context(), "stats", "_", "")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Semaphores []struct {
			Key              string
			Holders, Waiters int
		}
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(reply, "ok ")), &st); err != nil {
		t.Fatalf("stats %q: %v", reply, err)
	}
	for _, s := range st.Semaphores {
		if s.Key == keyPrefix+name {
			return dflockdSemaphore{s.Holders, s.Waiters}
		}
	}
	return dflockdSemaphore{}
}

func eventuallyStats(t *testing.T, addr, name string, want dflockdSemaphore) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		got := dflockdStats(t, addr, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v, want %+v", name, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDflockdSemaphore, against the real server, both ways of holding a
// client: two of limit 2 hold, a third waits until one lets go; a
// waiter whose ctx ends returns at once; a client closed while holding
// gives its slot back; another limit on the same name is refused.
func TestDflockdSemaphore(t *testing.T) {
	srv := realDflockd(t)
	if v, err := NewDflockd(srv.Addr, DflockdOptions{Version: srv.Version}).Version(t.Context()); err != nil || v == "" {
		t.Fatalf("Version: %q, %v", v, err)
	}
	for _, keep := range []bool{false, true} {
		sys := NewDflockd(srv.Addr, DflockdOptions{KeepConnection: keep})
		name := uniqueName(t)
		open := func(limit int) system.Client {
			c, err := sys.NewSlotClient(t.Context(), 0, limit)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		a, b, c := open(2), open(2), open(2)
		lockWithin(t, a, name)
		lockWithin(t, b, name)
		granted := make(chan error, 1)
		go func() { granted <- c.Lock(t.Context(), name) }()
		eventuallyStats(t, srv.Addr, name, dflockdSemaphore{Holders: 2, Waiters: 1})
		select {
		case err := <-granted:
			t.Fatalf("keep %v: a third holder on 2 slots: %v", keep, err)
		default:
		}
		unlockWithin(t, a, name)
		if err := <-granted; err != nil {
			t.Fatalf("keep %v: the waiter: %v", keep, err)
		}

		ctx, cancel := context.WithCancel(t.Context())
		d := open(2)
		gone := make(chan error, 1)
		go func() { gone <- d.Lock(ctx, name) }()
		eventuallyStats(t, srv.Addr, name, dflockdSemaphore{Holders: 2, Waiters: 1})
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Errorf("keep %v: cancelled waiter: %v", keep, err)
		}
		// dflockd does not read a connection while its sl waits, so the
		// closed waiter keeps its place until its turn: then the grant's
		// write fails and the slot goes back.
		c.Close()
		eventuallyStats(t, srv.Addr, name, dflockdSemaphore{Holders: 1})

		if err := open(3).Lock(t.Context(), name); err == nil || !strings.Contains(err.Error(), "error_limit_mismatch") {
			t.Errorf("keep %v: limit 3 on a name of limit 2: %v, want the mismatch", keep, err)
		}
		unlockWithin(t, b, name)
	}
}
