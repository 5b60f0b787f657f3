package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryWipedJoinedRefused: a node added with -join (the docs' way to
// replace a dead node: plain Raft, no -peers) that loses its data
// directory and starts again with the same command line does not take
// part under its id: it exits 1 saying how to come back, told by the
// leader whose RPC reached it. The cluster keeps serving, with rising
// tokens, and the way back (a new id) works.
func TestBinaryWipedJoinedRefused(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	var dead *clusterProc
	for _, p := range procs {
		if p != l {
			dead = p
			break
		}
	}
	dead.cmd.Process.Signal(syscall.SIGKILL)
	<-dead.log.waited
	dead.log.waited <- nil
	if code, out := batonCluster(t, "cluster", "remove", dead.id, "-ops-addr", l.opsAddr); code != 0 {
		t.Fatalf("remove %s: exit %d\n%s", dead.id, code, out)
	}
	join := func(id string) *clusterProc {
		t.Helper()
		a := freeAddrs(t, 3)
		p := &clusterProc{id: id, addr: a[0], opsAddr: a[1], raftAddr: a[2], dataDir: filepath.Join(t.TempDir(), "data")}
		p.startJoin(t)
		if code, out := batonCluster(t, "cluster", "add", id, p.raftAddr, "-ops-addr", l.opsAddr); code != 0 {
			t.Fatalf("add %s: exit %d\n%s", id, code, out)
		}
		return p
	}
	n4 := join("n4")
	waitJoined(t, l.log, "n4")
	g := readGranted(t, l.addr, "jobs", time.Second)
	g.conn.Close()

	n4.cmd.Process.Signal(syscall.SIGKILL)
	<-n4.log.waited
	n4.log.waited <- nil
	if err := os.RemoveAll(n4.dataDir); err != nil {
		t.Fatal(err)
	}
	n4.startJoin(t) // the same command line
	var err error
	select {
	case err = <-n4.log.waited:
		n4.log.waited <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("the wiped joined node still runs after 30 s; want it refused:\n%s", n4.log.drain(t))
	}
	out := n4.log.drain(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("wiped joined node exited %v, want status 1:\n%s", err, out)
	}
	for _, want := range []string{"held the log", "baton cluster remove n4", "-join"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	g2 := readGranted(t, l.addr, "jobs", time.Second)
	g2.conn.Close()
	if g2.token <= g.token {
		t.Fatalf("token after the refusal %#x, want above %#x", g2.token, g.token)
	}

	if code, out := batonCluster(t, "cluster", "remove", "n4", "-ops-addr", l.opsAddr); code != 0 {
		t.Fatalf("remove n4: exit %d\n%s", code, out)
	}
	n5 := join("n5")
	waitJoined(t, l.log, "n5")
	if v, err := getCluster(n5.opsAddr); err != nil || v.Leader == nil || len(v.Members) != 3 {
		t.Fatalf("n5 after it was added: %+v, %v", v, err)
	}
}

// startJoin starts p as a node added later, with the command line of the
// docs' way to replace a node on plain Raft: -join, no -peers.
func (p *clusterProc) startJoin(t *testing.T) {
	t.Helper()
	p.cmd = batonCmd(t, "serve", "-node-id", p.id, "-raft-addr", p.raftAddr, "-join",
		"-addr", p.addr, "-ops-addr", p.opsAddr, "-data-dir", p.dataDir, "-shutdown-linger=0s", "-log-format=json")
	p.log = startLogged(t, p.cmd)
}
