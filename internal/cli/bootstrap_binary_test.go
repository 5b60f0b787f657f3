package cli

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitJoined reads l (a leader's log) until every id is recorded as
// holding the log.
func waitJoined(t *testing.T, l *loggedCmd, ids ...string) {
	t.Helper()
	for {
		s, ok := l.next()
		if !ok {
			t.Fatalf("the leader never recorded %v as holding the log:\n%s", ids, strings.Join(l.seen, "\n"))
		}
		var m struct{ Msg, Joined string }
		if json.Unmarshal([]byte(s), &m) != nil || m.Msg != "members recorded as holding the log" {
			continue
		}
		all := true
		for _, id := range ids {
			all = all && strings.Contains(","+m.Joined+",", ","+id+",")
		}
		if all {
			return
		}
	}
}

// TestBinaryWipedFounderRefused: a founder that held the log and comes back
// with an empty data directory does not bootstrap again (its empty log and
// its vote could elect a leader that misses committed entries): it exits 1
// saying how to come back under a new id. The cluster keeps serving, with
// rising tokens.
func TestBinaryWipedFounderRefused(t *testing.T) {
	t.Parallel()
	procs, peers := clusterLayout(t)
	for _, p := range procs {
		p.start(t, peers)
	}
	l := waitLeader(t, procs)
	g := readGranted(t, l.addr, "jobs", time.Second)
	g.conn.Close()
	waitJoined(t, l.log, "n1", "n2", "n3")
	var f *clusterProc
	for _, p := range procs {
		if p != l {
			f = p
			break
		}
	}
	f.cmd.Process.Signal(syscall.SIGKILL)
	<-f.log.waited
	f.log.waited <- nil
	if err := os.RemoveAll(f.dataDir); err != nil {
		t.Fatal(err)
	}
	f.start(t, peers)
	var err error
	select {
	case err = <-f.log.waited:
		f.log.waited <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("the wiped founder %s still runs after 30 s; want it refused:\n%s", f.id, f.log.drain(t))
	}
	out := f.log.drain(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("wiped founder exited %v, want status 1:\n%s", err, out)
	}
	for _, want := range []string{"held the log", "baton cluster remove " + f.id, "-join"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	g2 := readGranted(t, l.addr, "jobs", time.Second)
	g2.conn.Close()
	if g2.token <= g.token {
		t.Fatalf("token after the refusal %#x, want above %#x", g2.token, g.token)
	}
}

// TestBinaryLateFounder: a founder started after the others have formed
// the cluster, with an empty data directory, never held the log: it
// starts without bootstrapping and is sent the log.
func TestBinaryLateFounder(t *testing.T) {
	t.Parallel()
	procs, peers := clusterLayout(t)
	for _, p := range procs[:2] {
		p.start(t, peers)
	}
	l := waitLeader(t, procs[:2])
	g := readGranted(t, l.addr, "jobs", time.Second)
	g.conn.Close()
	late := procs[2]
	late.start(t, peers)
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := getCluster(late.opsAddr)
		if err == nil && v.Leader != nil && v.Leader.ID == l.id && v.Epoch >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the late founder does not follow the leader: %+v, %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
