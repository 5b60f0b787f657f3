//go:build unix

package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestReleaseOfSeveralHolders: baton release of a semaphore with several
// holders names every session it took the lock from, in grant order.
func TestReleaseOfSeveralHolders(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token-of-32-characters-or-more"
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, token)
	for _, owner := range []string{"r1", "r2"} {
		c := batontest.Dial(t, srv.Addr)
		c.AcquireV2("sem", time.Minute, true, 3, false, owner)
		c.ReadFrame(5 * time.Second)
	}
	lv, _ := srv.Srv.Lock("sem")
	code, stdout, stderr := runAdmin(t, token, "release", "sem", "-ops-addr", opsAddr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "released sem: took it from session "+lv.Holders[0].ID+" (owner r1, token ") ||
		!strings.HasPrefix(lines[1], "released sem: took it from session "+lv.Holders[1].ID+" (owner r2, token ") {
		t.Fatalf("baton release of two holders: exit %d, stdout %q, stderr %q; want a line for each, in grant order", code, stdout, stderr)
	}
}

// semaphoreOf3 fills the semaphore "pool" (limit 3) with the raw shared
// holders r1..r3, queues a shared r4 and an exclusive w5 behind them, and
// holds "mutex" with an exclusive m1. It returns the holders' and waiters'
// connections, in that order, once the server shows them all.
func semaphoreOf3(t *testing.T, srv *batontest.Server) []*batontest.Conn {
	t.Helper()
	var conns []*batontest.Conn
	for _, owner := range []string{"r1", "r2", "r3", "r4"} {
		c := batontest.Dial(t, srv.Addr)
		c.AcquireV2("pool", time.Minute, true, 3, false, owner)
		c.ReadFrame(5 * time.Second)
		conns = append(conns, c)
	}
	w := batontest.Dial(t, srv.Addr)
	w.AcquireV2("pool", time.Minute, false, 1, false, "w5")
	w.ReadFrame(5 * time.Second)
	conns = append(conns, w)
	m := batontest.Dial(t, srv.Addr)
	m.Acquire("mutex", time.Minute, false, "m1")
	m.ReadFrame(5 * time.Second)
	lv, _ := srv.Srv.Lock("pool")
	if len(lv.Holders) != 3 || len(lv.Waiters) != 2 {
		t.Fatalf("pool: %d holders and %d waiters, want 3 and 2", len(lv.Holders), len(lv.Waiters))
	}
	return conns
}

// TestLocksShowsEveryHolder: baton locks lists a row for each holder of a
// semaphore, with its kind, and the slots in use against the limit; baton
// locks NAME a line on each holder and the limit; -json is the API's own.
func TestLocksShowsEveryHolder(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, "")
	semaphoreOf3(t, srv)
	lv, _ := srv.Srv.Lock("pool")
	mv, _ := srv.Srv.Lock("mutex")

	code, stdout, stderr := runAdmin(t, "", "locks", "-ops-addr", opsAddr)
	l := lines(stdout)
	if code != 0 || stderr != "" || len(l) != 5 {
		t.Fatalf("baton locks: exit %d, stderr %q, stdout:\n%s\nwant a header, a row per holder of pool (3) and one of mutex", code, stderr, stdout)
	}
	if !regexp.MustCompile(`^NAME +HOLDER +SESSION +KIND +TOKEN +HELD FOR +SLOTS +WAITERS$`).MatchString(l[0]) {
		t.Errorf("header %q", l[0])
	}
	for i, h := range lv.Holders {
		row := fmt.Sprintf(`^pool +r%d +%s +shared +%d +\S+ +3/3 +2$`, i+1, h.ID, h.Token)
		if !regexp.MustCompile(row).MatchString(l[2+i]) {
			t.Errorf("row %q, want it to match %s", l[2+i], row)
		}
	}
	if row := fmt.Sprintf(`^mutex +m1 +%s +exclusive +%d +\S+ +1/1 +0$`, mv.Holders[0].ID, mv.Holders[0].Token); !regexp.MustCompile(row).MatchString(l[1]) {
		t.Errorf("row %q, want it to match %s", l[1], row)
	}

	code, stdout, _ = runAdmin(t, "", "locks", "pool", "-ops-addr", opsAddr)
	for _, want := range []string{
		"holder: session " + lv.Holders[0].ID + " from ", "holder: session " + lv.Holders[2].ID + " from ",
		"limit: 3 shared claims at once",
	} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("baton locks pool: exit %d, stdout lacks %q:\n%s", code, want, stdout)
		}
	}
	for i, want := range []string{`r4 +shared`, `w5 +exclusive`} {
		if re := fmt.Sprintf(`(?m)^%d +%s +%s `, i+1, lv.Waiters[i].ID, want); !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("baton locks pool: no waiter row matching %s:\n%s", re, stdout)
		}
	}

	code, stdout, _ = runAdmin(t, "", "locks", "pool", "-json", "-ops-addr", opsAddr)
	var got struct {
		Holders []struct {
			ID     string `json:"id"`
			Shared bool   `json:"shared"`
		} `json:"holders"`
		Limit int `json:"limit"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil || len(got.Holders) != 3 || got.Limit != 3 || !got.Holders[1].Shared {
		t.Errorf("baton locks pool -json: exit %d, %v: %s; want the API's lock with its 3 holders and limit 3", code, err, stdout)
	}
}

// TestReleaseOneHolder: baton release -session ID ends that holder alone;
// the others keep their slots and the freed one goes to the next waiter.
// A waiter, a lock name beside -session, an id that is not a number, and
// an unknown session are refused, each with its own exit status.
func TestReleaseOneHolder(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, "")
	conns := semaphoreOf3(t, srv)
	lv, _ := srv.Srv.Lock("pool")
	ops := "-ops-addr=" + opsAddr
	r2, r4, w5 := lv.Holders[1], lv.Waiters[0], lv.Waiters[1]

	code, stdout, stderr := runAdmin(t, "", "release", "-session", r2.ID, ops)
	want := fmt.Sprintf("released pool: took it from session %s (owner r2, token %d, held for ", r2.ID, r2.Token)
	if code != 0 || !strings.HasPrefix(stdout, want) || len(lines(stdout)) != 1 {
		t.Fatalf("baton release -session %s: exit %d, stdout %q, stderr %q; want 0 and %q...", r2.ID, code, stdout, stderr, want)
	}
	if f := conns[1].ReadFrame(5 * time.Second); f.Err == nil || f.Err.Code != wire.CodeForceReleased {
		t.Errorf("r2 got %v, want ERROR FORCE_RELEASED", f)
	}
	if f := conns[3].ReadFrame(5 * time.Second); !f.Push {
		t.Errorf("r4 got %v, want the freed slot (ACQUIRED push)", f)
	}
	after, _ := srv.Srv.Lock("pool")
	var owners []string
	for _, h := range after.Holders {
		owners = append(owners, h.Owner)
	}
	if got := strings.Join(owners, ","); got != "r1,r3,r4" {
		t.Errorf("pool's holders after the release of r2: %s, want r1,r3,r4", got)
	}

	for _, tt := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"release", "-session", w5.ID}, exitFailure,
			"session " + w5.ID + " waits for lock pool and holds nothing; remove it from the queue with 'baton kick " + w5.ID + "'"},
		{[]string{"release", "pool", "-session", r4.ID}, exitUsage, "give a lock name (every holder) or -session ID (one holder), not both"},
		{[]string{"release", "-session", "pool"}, exitUsage, `session ids are numbers, as 'baton locks NAME' lists them: "pool" is not one`},
		{[]string{"release", "-session", "99999"}, exitNotFound, `session "99999" not found`},
		{[]string{"release"}, exitUsage, "no lock name given (or -session ID for one holder)"},
		{[]string{"kick", r4.ID}, exitFailure,
			"session " + r4.ID + " holds lock pool with 2 other holders and cannot be kicked; use 'baton release -session " + r4.ID + "' (this holder) or 'baton release pool' (every holder)"},
	} {
		code, stdout, stderr := runAdmin(t, "", append(tt.args, ops)...)
		if code != tt.code || stdout != "" || !strings.Contains(stderr, tt.contains) {
			t.Errorf("baton %q: exit %d, stdout %q, stderr %q; want %d and %q", tt.args, code, stdout, stderr, tt.code, tt.contains)
		}
	}
	if lv, _ := srv.Srv.Lock("pool"); len(lv.Holders) != 3 || len(lv.Waiters) != 1 {
		t.Errorf("after the refusals pool has %d holders and %d waiters, want 3 and 1", len(lv.Holders), len(lv.Waiters))
	}
}
