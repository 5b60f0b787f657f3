//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/runner"
)

// holdUntil is a command for baton run that writes its BATON_TOKEN to the
// file token in its directory, then runs until the file gate exists.
func holdUntil(gate string) []string {
	return []string{"sh", "-c", `echo "$BATON_TOKEN" > token; while [ ! -e '` + gate + `' ]; do sleep 0.05; done`}
}

// holdersOf is the owners of name's holders in grant order, whether each
// is shared, and the limit in force.
func holdersOf(srv *batontest.Server, name string) (owners []string, shared []bool, limit int) {
	v, _ := srv.Srv.Lock(name)
	for _, h := range v.Holders {
		owners = append(owners, h.Owner)
		shared = append(shared, h.Shared)
	}
	return owners, shared, v.Limit
}

// TestRunLimit: baton run -limit 2 holds a slot of a semaphore of 2, from
// the flag or BATON_LIMIT: two runs hold at once, each with its own token;
// a third with -nowait is busy (75), one with -wait gives up (76); a
// shared claim with another limit is refused with exit 2 and a line that
// names the limit in force, also under -q; a waiter tells the slots in use
// (-v) and takes a slot freed.
func TestRunLimit(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	gate := filepath.Join(t.TempDir(), "go")
	a := startBaton(t, append([]string{"run", "-limit", "2", "-owner", "slot-a", "-addr", srv.Addr, "gpu/pool", "--"}, holdUntil(gate)...)...)
	b := startBatonEnv(t, []string{"BATON_LIMIT=2"}, append([]string{"run", "-owner", "slot-b", "-addr", srv.Addr, "gpu/pool", "--"}, holdUntil(gate)...)...)
	tokA := mustUint(t, readFileWhenThere(t, filepath.Join(a.dir, "token")))
	tokB := mustUint(t, readFileWhenThere(t, filepath.Join(b.dir, "token")))
	if tokA == tokB {
		t.Errorf("both slots have token %d, want one each", tokA)
	}
	owners, shared, limit := holdersOf(srv, "gpu/pool")
	slices.Sort(owners)
	if !slices.Equal(owners, []string{"slot-a", "slot-b"}) || !slices.Equal(shared, []bool{true, true}) || limit != 2 {
		t.Fatalf("gpu/pool: holders %q shared %v limit %d, want slot-a and slot-b, both shared, limit 2", owners, shared, limit)
	}

	code, stdout, stderr := runBaton(t, "run", "-nowait", "-limit", "2", "-addr", srv.Addr, "gpu/pool", "--", "echo", "ran")
	if want := "baton run: lock gpu/pool is busy; not waiting (-nowait)\n"; code != runner.ExitBusy || stdout != "" || stderr != want {
		t.Errorf("-nowait on a full semaphore: exit %d, stdout %q, stderr %q; want %d, nothing, %q", code, stdout, stderr, runner.ExitBusy, want)
	}
	code, stdout, stderr = runBaton(t, "run", "-wait", "300ms", "-limit", "2", "-addr", srv.Addr, "gpu/pool", "--", "echo", "ran")
	if want := "baton run: gave up waiting for lock gpu/pool after 300ms (-wait)\n"; code != runner.ExitWaitTimeout || stdout != "" || stderr != want {
		t.Errorf("-wait on a full semaphore: exit %d, stdout %q, stderr %q; want %d, nothing, %q", code, stdout, stderr, runner.ExitWaitTimeout, want)
	}

	const mismatch = "baton run: lock gpu/pool has the limit 2 in force, set by its shared sessions; this run asked for -limit 3: every shared claim of a name must give the same limit\n"
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"-limit 3", []string{"-limit", "3"}, mismatch},
		{"-limit 3 -nowait", []string{"-nowait", "-limit", "3"}, mismatch}, // the limit is checked before BUSY
		{"-limit 3 -q", []string{"-q", "-limit", "3"}, mismatch},
		{"-shared", []string{"-shared"},
			"baton run: lock gpu/pool is a semaphore of 2 (the limit its shared sessions set), and -shared claims a reader's limit, 65535: use -limit 2 for a slot of it\n"},
	} {
		args := append(append([]string{"run", "-addr", srv.Addr}, tt.args...), "gpu/pool", "--", "echo", "ran")
		code, stdout, stderr := runBaton(t, args...)
		if code != exitUsage || stdout != "" || stderr != tt.want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, nothing, %q", tt.name, code, stdout, stderr, exitUsage, tt.want)
		}
	}

	// A waiter says who holds the slots and how many there are, and takes
	// the slot that a holder frees.
	w := startBaton(t, "run", "-v", "-ops-addr", startOps(t, srv, ""), "-limit", "2", "-owner", "slot-c", "-addr", srv.Addr, "gpu/pool", "--", "sh", "-c", `echo "$BATON_TOKEN" > token`)
	status := regexp.MustCompile(`baton run: waiting for gpu/pool: position 1, held by slot-[ab] and 1 other, 2/2 slots\n`)
	batontest.Eventually(t, 10*time.Second, func() bool { return status.MatchString(w.stderr.String()) },
		"no -v line of the waiter that matches %s; stderr:\n%s", status, w.stderr)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*batonProc{a, b, w} {
		if code := p.wait(t); code != 0 {
			t.Errorf("baton %q: exit %d, want 0; stderr:\n%s", p.cmd.Args[1:], code, p.stderr)
		}
	}
	if tokC := mustUint(t, readFileWhenThere(t, filepath.Join(w.dir, "token"))); tokC <= max(tokA, tokB) {
		t.Errorf("the waiter's token %d, want above the holders' %d and %d", tokC, tokA, tokB)
	}
	if _, ok := srv.Srv.Lock("gpu/pool"); ok {
		t.Errorf("gpu/pool still has sessions after every baton run exited")
	}
}

// TestRunShared: baton run -shared (or BATON_SHARED) is a reader: readers
// hold together, a writer (no flag) waits for them, and a reader that
// comes after a waiting writer waits behind it (-nowait: busy); a
// semaphore's -limit on a readers' name is refused, naming the read/write
// lock.
func TestRunShared(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	gate := filepath.Join(t.TempDir(), "go")
	r1 := startBaton(t, append([]string{"run", "-shared", "-owner", "reader-1", "-addr", srv.Addr, "config/db", "--"}, holdUntil(gate)...)...)
	r2 := startBatonEnv(t, []string{"BATON_SHARED=true"}, append([]string{"run", "-owner", "reader-2", "-addr", srv.Addr, "config/db", "--"}, holdUntil(gate)...)...)
	readFileWhenThere(t, filepath.Join(r1.dir, "token"))
	readFileWhenThere(t, filepath.Join(r2.dir, "token"))
	if owners, shared, limit := holdersOf(srv, "config/db"); len(owners) != 2 || !slices.Equal(shared, []bool{true, true}) || limit != 65535 {
		t.Fatalf("config/db: holders %q shared %v limit %d, want 2 readers, the readers' limit 65535", owners, shared, limit)
	}

	code, stdout, stderr := runBaton(t, "run", "-addr", srv.Addr, "-limit", "4", "config/db", "--", "echo", "ran")
	if want := "baton run: lock config/db is a read/write lock: its shared sessions are readers (limit 65535, as -shared gives); this run asked for -limit 4\n"; code != exitUsage || stdout != "" || stderr != want {
		t.Errorf("-limit 4 on a readers' name: exit %d, stdout %q, stderr %q; want %d, nothing, %q", code, stdout, stderr, exitUsage, want)
	}
	code, _, stderr = runBaton(t, "run", "-nowait", "-addr", srv.Addr, "config/db", "--", "echo", "ran")
	if code != runner.ExitBusy {
		t.Errorf("a writer with -nowait beside readers: exit %d, want %d; stderr %q", code, runner.ExitBusy, stderr)
	}

	writer := startBaton(t, "run", "-owner", "writer", "-addr", srv.Addr, "config/db", "--", "sh", "-c", `echo "$BATON_TOKEN" > token`)
	batontest.Eventually(t, 10*time.Second, func() bool { return waiters(srv, "config/db") == 1 }, "the writer does not wait")
	code, stdout, stderr = runBaton(t, "run", "-nowait", "-shared", "-addr", srv.Addr, "config/db", "--", "echo", "ran")
	if code != runner.ExitBusy || stdout != "" || stderr != "baton run: lock config/db is busy; not waiting (-nowait)\n" {
		t.Errorf("a reader behind a waiting writer, -nowait: exit %d, stdout %q, stderr %q; want %d and busy: nobody overtakes", code, stdout, stderr, runner.ExitBusy)
	}
	late := startBaton(t, "run", "-shared", "-owner", "reader-3", "-addr", srv.Addr, "config/db", "--", "sh", "-c", `echo "$BATON_TOKEN" > token`)
	batontest.Eventually(t, 10*time.Second, func() bool { return waiters(srv, "config/db") == 2 }, "the late reader does not wait")

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*batonProc{r1, r2, writer, late} {
		if code := p.wait(t); code != 0 {
			t.Errorf("baton %q: exit %d, want 0; stderr:\n%s", p.cmd.Args[1:], code, p.stderr)
		}
	}
	tokW := mustUint(t, readFileWhenThere(t, filepath.Join(writer.dir, "token")))
	if tokR := mustUint(t, readFileWhenThere(t, filepath.Join(late.dir, "token"))); tokR <= tokW {
		t.Errorf("the late reader's token %d is not above the writer's %d: it overtook the writer", tokR, tokW)
	}
}

// TestRunReleaseOneSlot: baton release -session ends one baton run among
// a semaphore's holders (exit 77, its command stopped); the other keeps
// its slot and its command runs on. baton release NAME then ends both.
func TestRunReleaseOneSlot(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, "")
	gate := filepath.Join(t.TempDir(), "go")
	a := startBaton(t, append([]string{"run", "-limit", "3", "-owner", "slot-a", "-addr", srv.Addr, "gpu/pool", "--"}, holdUntil(gate)...)...)
	b := startBaton(t, append([]string{"run", "-limit", "3", "-owner", "slot-b", "-addr", srv.Addr, "gpu/pool", "--"}, holdUntil(gate)...)...)
	c := startBaton(t, append([]string{"run", "-limit", "3", "-owner", "slot-c", "-addr", srv.Addr, "gpu/pool", "--"}, holdUntil(gate)...)...)
	for _, p := range []*batonProc{a, b, c} {
		readFileWhenThere(t, filepath.Join(p.dir, "token"))
	}
	v, _ := srv.Srv.Lock("gpu/pool")
	var bID string
	for _, h := range v.Holders {
		if h.Owner == "slot-b" {
			bID = h.ID
		}
	}
	if code, stdout, stderr := runAdmin(t, "", "release", "-session", bID, "-ops-addr", opsAddr); code != 0 || !strings.HasPrefix(stdout, "released gpu/pool: took it from session "+bID+" (owner slot-b, ") {
		t.Fatalf("baton release -session %s: exit %d, stdout %q, stderr %q", bID, code, stdout, stderr)
	}
	if code := b.wait(t); code != runner.ExitLockLost {
		t.Errorf("the released slot's baton run: exit %d, want %d; stderr:\n%s", code, runner.ExitLockLost, b.stderr)
	}
	if owners, _, _ := holdersOf(srv, "gpu/pool"); !slices.Equal(slices.Sorted(slices.Values(owners)), []string{"slot-a", "slot-c"}) {
		t.Fatalf("holders after the release of slot-b: %q, want slot-a and slot-c", owners)
	}
	for _, p := range []*batonProc{a, c} {
		select {
		case <-p.done:
			t.Fatalf("baton %q ended when another holder was released; stderr:\n%s", p.cmd.Args[1:], p.stderr)
		default:
		}
	}

	code, stdout, stderr := runAdmin(t, "", "release", "gpu/pool", "-ops-addr", opsAddr)
	if code != 0 || len(lines(stdout)) != 2 {
		t.Errorf("baton release gpu/pool: exit %d, stdout %q, stderr %q; want a line for each of the 2 holders", code, stdout, stderr)
	}
	for _, p := range []*batonProc{a, c} {
		if code := p.wait(t); code != runner.ExitLockLost {
			t.Errorf("baton %q after baton release NAME: exit %d, want %d", p.cmd.Args[1:], code, runner.ExitLockLost)
		}
	}
}
