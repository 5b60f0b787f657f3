//go:build unix

package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
)

// TestReleaseOfSeveralHolders: baton release of a semaphore with several
// holders names every session it took the lock from, in grant order.
func TestReleaseOfSeveralHolders(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
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
