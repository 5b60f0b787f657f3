package cli

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TestBinaryCrashGraceShown: after kill -9 of a server whose session held a
// lock, the restarted server grants nothing for the old lease, and says so
// where a person looks: baton locks prints "grace: grants resume in ...",
// and a waiting baton run -v prints it in its waiting line (from the ops
// API at its default address's place, given here as -ops-addr).
func TestBinaryCrashGraceShown(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second
	dataDir := t.TempDir()
	cmd, addr := startServeBinary(t, dataDir)
	if _, typ := acquireConn(t, addr, "jobs", lease); typ != wire.TypeAcquired {
		t.Fatalf("first run: got %v, want ACQUIRED", typ)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	serve := batonCmd(t, "serve", "-addr=127.0.0.1:0", "-ops-addr=127.0.0.1:0", "-shutdown-linger=0s",
		"-data-dir="+dataDir, "-log-format=json")
	// Before the start: the grace runs from the server's own start, which
	// its "serving" line follows by however long a loaded machine takes.
	restarted := time.Now()
	sl := waitServing(t, startLogged(t, serve).next)

	run := startBaton(t, "run", "-v", "-addr", sl.Addr, "-ops-addr", sl.OpsAddr, "jobs", "--", "true")
	var locks string
	for time.Since(restarted) < lease/2 {
		_, locks = batonOut(t, "locks", "-ops-addr", sl.OpsAddr)
		if strings.Contains(locks, "1\n") { // the run waits
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(locks, "grace: grants resume in ") {
		t.Errorf("baton locks during the crash grace:\n%s\nwant a line \"grace: grants resume in ...\"", locks)
	}
	if code := run.wait(t); code != 0 {
		t.Fatalf("baton run: exit %d, want 0; stderr:\n%s", code, run.stderr)
	}
	stderr := run.stderr.String()
	if !strings.Contains(stderr, "baton run: waiting for jobs: position 1, grace: grants resume in ") {
		t.Errorf("baton run -v during the crash grace:\n%s\nwant a waiting line with \"grace: grants resume in ...\"", stderr)
	}
	if waited := time.Since(restarted); waited < lease {
		t.Errorf("granted %v after the restart, within the crash grace of %v", waited, lease)
	}
}

// TestBinaryClusterAddSilentMember: baton cluster add of an address where
// nothing listens warns that the new member has not answered and shows it
// unreachable, and the cluster unhealthy.
func TestBinaryClusterAddSilentMember(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)

	dead := freeAddrs(t, 1)[0]
	code, out := batonCluster(t, "cluster", "-ops-addr", l.opsAddr, "add", "n4", dead)
	if code != 0 {
		t.Fatalf("baton cluster add n4 %s: exit %d:\n%s", dead, code, out)
	}
	if !strings.Contains(out, "warning: n4 at "+dead+" has not answered the leader") {
		t.Errorf("baton cluster add of an address where nothing listens:\n%s\nwant a warning that n4 has not answered", out)
	}
	if !strings.Contains(out, "cluster UNHEALTHY") || !regexp.MustCompile(`(?m)^n4 .*UNREACHABLE`).MatchString(out) {
		t.Errorf("baton cluster add of an address where nothing listens:\n%s\nwant the cluster UNHEALTHY and n4 UNREACHABLE", out)
	}
}

// TestBinaryClusterGraceThroughFollower: after kill -9 of the leader, baton
// cluster asked through a follower reports the new leader's failover
// grace, not the follower's own none, and a baton run -v that waits
// through it says when grants resume.
func TestBinaryClusterGraceThroughFollower(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	const lease = 6 * time.Second
	readGranted(t, l.addr, "jobs", lease) // after the first leader's own short grace
	l.cmd.Process.Signal(syscall.SIGKILL)
	var rest []*clusterProc
	for _, p := range procs {
		if p != l {
			rest = append(rest, p)
		}
	}
	nl := waitLeader(t, rest)
	var follower *clusterProc
	for _, p := range rest {
		if p != nl {
			follower = p
		}
	}
	run := startBaton(t, "run", "-v", "-addr", nl.addr+","+follower.addr, "-ops-addr", follower.opsAddr+","+nl.opsAddr, "jobs", "--", "true")

	// The follower learns the new leader's addresses from the log a
	// moment after the leader is ready: until then it answers "unknown".
	re := regexp.MustCompile(`grace remaining ([0-9.a-zµ]+) \(the leader's\)`)
	var m []string
	var out string
	for deadline := time.Now().Add(lease / 2); m == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, out = batonCluster(t, "cluster", "-ops-addr", follower.opsAddr)
		if strings.Contains(out, "grace remaining") {
			m = re.FindStringSubmatch(out)
			break
		}
	}
	if m == nil {
		t.Errorf("baton cluster through follower %s during the new leader's grace:\n%s\nwant \"grace remaining D (the leader's)\"", follower.id, out)
	} else if d, err := time.ParseDuration(m[1]); err != nil || d <= 0 {
		t.Errorf("baton cluster through follower %s: grace remaining %q, want the leader's, above 0", follower.id, m[1])
	}
	if code := run.wait(t); code != 0 {
		t.Fatalf("baton run: exit %d, want 0; stderr:\n%s", code, run.stderr)
	}
	if s := run.stderr.String(); !strings.Contains(s, ", grace: grants resume in ") {
		t.Errorf("baton run -v through the failover grace:\n%s\nwant a waiting line with \"grace: grants resume in ...\"", s)
	}
}
