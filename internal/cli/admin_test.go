//go:build unix

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/human"
)

// runAdmin runs the binary with BATON_ADMIN_TOKEN=token ("" for none).
func runAdmin(t *testing.T, token string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var env []string
	if token != "" {
		env = []string{"BATON_ADMIN_TOKEN=" + token}
	}
	p := startBatonEnv(t, env, args...)
	code = p.wait(t)
	return code, p.stdout.String(), p.stderr.String()
}

// TestAdminCommands drives locks, kick and release against a server with
// a holder and a waiter on a lock whose name needs %2F, through an ops API
// that wants a token.
func TestAdminCommands(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token-of-32-characters-or-more"
	const name = "jobs/nightly build"
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, token)
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	held := holdLock(t, srv.Addr, name, "holder:1")
	waiter, err := baton.New([]string{srv.Addr}, baton.WithOwner("waiter:2"))
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(waitCtx, name)
		if err == nil {
			l.Release()
		}
		waited <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-waited
	})
	batontest.Eventually(t, 10*time.Second, func() bool { return waiters(srv, name) == 1 }, "the waiter is not in the queue")
	view, _ := srv.Srv.Lock(name)
	holderID, waiterID := view.Holder.ID, view.Waiters[0].ID
	ops := "-ops-addr=" + opsAddr

	t.Run("unauthorized", func(t *testing.T) {
		code, stdout, stderr := runAdmin(t, "", "locks", ops)
		if code != exitFailure || stdout != "" {
			t.Errorf("exit code %d, stdout %q; want 1 and nothing", code, stdout)
		}
		if want := "baton locks: unauthorized: set BATON_ADMIN_TOKEN or -admin-token-file\n"; stderr != want {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
		code, _, stderr = runAdmin(t, "wrong", "locks", ops)
		if code != exitFailure || !strings.Contains(stderr, "unauthorized: the ops API at "+opsAddr+" refused the admin token (invalid bearer token)") {
			t.Errorf("wrong token: exit code %d, stderr %q", code, stderr)
		}
	})

	t.Run("locks", func(t *testing.T) {
		code, stdout, stderr := runAdmin(t, token, "locks", ops)
		if code != 0 || stderr != "" {
			t.Fatalf("exit code %d, stderr %q; want 0 and nothing", code, stderr)
		}
		l := lines(stdout)
		if len(l) != 2 {
			t.Fatalf("stdout %q, want a header and one row", stdout)
		}
		if !regexp.MustCompile(`^NAME +HOLDER +SESSION +KIND +TOKEN +HELD FOR +SLOTS +WAITERS$`).MatchString(l[0]) {
			t.Errorf("header %q", l[0])
		}
		row := `^jobs/nightly build +holder:1 +` + holderID + ` +exclusive +` + tokenOf(held) + ` +\S+ +1/1 +1$`
		if !regexp.MustCompile(row).MatchString(l[1]) {
			t.Errorf("row %q, want it to match %s", l[1], row)
		}
	})

	t.Run("locks NAME with token file", func(t *testing.T) {
		code, stdout, stderr := runAdmin(t, "", "locks", name, ops, "-admin-token-file", tokenFile)
		if code != 0 || stderr != "" {
			t.Fatalf("exit code %d, stderr %q; want 0 and nothing", code, stderr)
		}
		waiterRow := regexp.MustCompile(`(?m)^1 +` + waiterID + ` +waiter:2 +exclusive +\S+ +10s +127\.0\.0\.1:\d+$`)
		if !strings.Contains(stdout, "POSITION") || !waiterRow.MatchString(stdout) {
			t.Errorf("stdout lacks the queue with the waiter:\n%s", stdout)
		}
	})

	t.Run("locks -json", func(t *testing.T) {
		code, stdout, _ := runAdmin(t, token, "locks", "-json", ops)
		var got struct {
			Locks []struct {
				Name   string `json:"name"`
				Holder struct {
					Owner string `json:"owner"`
				} `json:"holder"`
				Waiters []json.RawMessage `json:"waiters"`
			} `json:"locks"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil {
			t.Fatalf("exit code %d, JSON %v: %q", code, err, stdout)
		}
		if len(got.Locks) != 1 || got.Locks[0].Name != name || got.Locks[0].Holder.Owner != "holder:1" || len(got.Locks[0].Waiters) != 1 {
			t.Errorf("JSON %s, want the one lock with its holder and waiter", stdout)
		}
	})

	t.Run("not found", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"locks", "jobs/none"}, `baton locks: lock "jobs/none" not found: nobody holds or waits for it` + "\n"},
			{[]string{"release", "jobs/none"}, `baton release: lock "jobs/none" is not held` + "\n"},
			{[]string{"kick", "99999"}, `baton kick: session "99999" not found` + "\n"},
		} {
			code, stdout, stderr := runAdmin(t, token, append(tt.args, ops)...)
			if code != exitNotFound || stdout != "" || stderr != tt.want {
				t.Errorf("baton %q: exit code %d, stdout %q, stderr %q; want 3, nothing, %q", tt.args, code, stdout, stderr, tt.want)
			}
		}
	})

	t.Run("kick holder", func(t *testing.T) {
		code, _, stderr := runAdmin(t, token, "kick", holderID, ops)
		want := "baton kick: session " + holderID + " holds lock " + name + " and cannot be kicked; use 'baton release " + human.ShellQuote(name) + "'\n"
		if code != exitFailure || stderr != want {
			t.Errorf("exit code %d, stderr %q; want 1, %q", code, stderr, want)
		}
	})

	// Kick, then release: they change the state the earlier subtests read.
	code, stdout, stderr := runAdmin(t, token, "kick", waiterID, ops)
	if code != 0 || !strings.HasPrefix(stdout, "kicked session "+waiterID+" (owner waiter:2, waited ") {
		t.Errorf("kick: exit code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, baton.ErrKicked) {
			t.Errorf("the kicked waiter's Acquire: %v, want ErrKicked", err)
		}
		waited <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the kicked waiter is still waiting")
	}

	code, stdout, stderr = runAdmin(t, token, "release", name, ops)
	want := "released " + name + ": took it from session " + holderID + " (owner holder:1, token " + tokenOf(held) + ", held for "
	if code != 0 || !strings.HasPrefix(stdout, want) {
		t.Errorf("release: exit code %d, stdout %q, stderr %q; want 0 and %q...", code, stdout, stderr, want)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), baton.ErrForceReleased) {
			t.Errorf("the holder's loss: %v, want ErrForceReleased", held.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder did not lose the lock")
	}

	code, _, stderr = runAdmin(t, token, "locks", ops)
	if code != 0 || stderr != "baton locks: no lock is held or waited for\n" {
		t.Errorf("locks with none: exit code %d, stderr %q", code, stderr)
	}
}

func tokenOf(l *baton.Lock) string { return strconv.FormatUint(l.Token(), 10) }

func TestAdminServerDown(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, args := range [][]string{{"locks"}, {"release", "jobs/x"}, {"kick", "1"}} {
		code, stdout, stderr := runAdmin(t, "", append(args, "-ops-addr", addr)...)
		want := "baton " + args[0] + ": cannot reach the ops API at " + addr + ": connection refused\n"
		if code != exitFailure || stdout != "" || stderr != want {
			t.Errorf("baton %q: exit code %d, stdout %q, stderr %q; want 1, nothing, %q", args, code, stdout, stderr, want)
		}
	}
}

// TestAdminAddressList: -ops-addr takes the nodes of a cluster as a list;
// a node that refuses is skipped, for reads and for actions alike, and a
// list where nothing answers names every refusal.
func TestAdminAddressList(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	opsAddr := startOps(t, srv, "")
	down := closedAddr(t)
	holdLock(t, srv.Addr, "jobs/list", "holder:1")

	code, stdout, stderr := runAdmin(t, "", "locks", "-ops-addr", down+","+opsAddr)
	if code != exitOK || !strings.Contains(stdout, "jobs/list") {
		t.Errorf("baton locks with the first node down: exit %d, stdout %q, stderr %q; want the lock from the second", code, stdout, stderr)
	}
	code, stdout, stderr = runAdmin(t, "", "release", "-ops-addr", down+", "+opsAddr, "jobs/list")
	if code != exitOK {
		t.Errorf("baton release with the first node down: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if n := len(srv.Srv.Locks()); n != 0 {
		t.Errorf("%d locks after the release, want 0", n)
	}
	down2 := closedAddr(t)
	code, _, stderr = runAdmin(t, "", "locks", "-ops-addr", down+","+down2)
	want := "baton locks: cannot reach the ops API at " + down + "," + down2 + ": connection refused\n"
	if code != exitFailure || stderr != want {
		t.Errorf("every node down: exit %d, stderr %q; want 1, %q", code, stderr, want)
	}
	code, _, stderr = runAdmin(t, "", "locks", "-ops-addr", ",")
	if code != exitUsage || !strings.Contains(stderr, "names no address") {
		t.Errorf("-ops-addr ',': exit %d, stderr %q; want a usage error", code, stderr)
	}
}
