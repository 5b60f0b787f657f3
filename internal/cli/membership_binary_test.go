package cli

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryRemovedAndJoiningNodes, over Raft TLS: a node started with
// -join says that it waits to be added and how (not only raft's "no known
// peers, aborting election"); a member removed while it was down and
// started again with its old data says that it was removed and how to come
// back, and stops (exit 1) instead of looping on refused elections.
func TestBinaryRemovedAndJoiningNodes(t *testing.T) {
	t.Parallel()
	p := newTLSClusterPKI(t)
	p.nodes["n4"] = p.ca.Node(t, "n4").Write(t, p.dir, "n4")
	procs, peers := clusterLayout(t)
	start := func(c *clusterProc, extra ...string) {
		c.cmd = batonCmd(t, append([]string{"serve", "-node-id", c.id, "-raft-addr", c.raftAddr, "-peers", peers,
			"-addr", c.addr, "-ops-addr", c.opsAddr, "-data-dir", c.dataDir, "-shutdown-linger=0s", "-log-format=json",
			"-raft-tls-cert", p.nodes[c.id].Cert, "-raft-tls-key", p.nodes[c.id].Key, "-raft-tls-ca", p.caFile}, extra...)...)
		c.log = startLogged(t, c.cmd)
	}
	for _, c := range procs {
		start(c)
	}
	waitAllFollow(t, procs)
	l := waitLeader(t, procs)

	// A node that waits to be added says how.
	a := freeAddrs(t, 3)
	n4 := &clusterProc{id: "n4", addr: a[0], opsAddr: a[1], raftAddr: a[2], dataDir: t.TempDir()}
	start(n4, "-join")
	want := "waiting to be added: run baton cluster add n4 " + n4.raftAddr + " on a member"
	waitLogMsg(t, n4.log, want, 15*time.Second)

	// A follower removed while down, started again with its old data.
	var gone *clusterProc
	for _, c := range procs {
		if c != l {
			gone = c
			break
		}
	}
	gone.cmd.Process.Signal(syscall.SIGKILL)
	<-gone.log.waited
	gone.log.waited <- nil
	if code, out := batonCluster(t, "cluster", "-ops-addr", l.opsAddr, "remove", gone.id); code != 0 {
		t.Fatalf("baton cluster remove %s: exit %d:\n%s", gone.id, code, out)
	}
	start(gone)
	select {
	case err := <-gone.log.waited:
		gone.log.waited <- err
		logged := gone.log.drain(t)
		if code := gone.cmd.ProcessState.ExitCode(); code != 1 ||
			!strings.Contains(logged, "this node was removed from the cluster") ||
			!strings.Contains(logged, "wipe its data directory and start it with -join") {
			t.Errorf("the removed node started with its old data: exit %d, log:\n%s\nwant exit 1 and \"this node was removed from the cluster ... wipe its data directory and start it with -join\"", code, lastLines(logged, 8))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the removed node, started with its old data, still runs after 60s:\n%s", lastLines(strings.Join(gone.log.seen, "\n"), 8))
	}
}

// waitLogMsg reads l's JSON log lines until one has message msg.
func waitLogMsg(t *testing.T, l *loggedCmd, msg string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		s, ok := l.next()
		if !ok {
			break
		}
		var m struct{ Msg string }
		if json.Unmarshal([]byte(s), &m) == nil && m.Msg == msg {
			return
		}
	}
	t.Fatalf("no log line %q within %v; the last lines:\n%s", msg, within, lastLines(strings.Join(l.seen, "\n"), 8))
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestBinaryRemovedNodePlain: on plain TCP the members do not refuse a
// removed node's connections, only its votes; it asks them, once no
// leader has been known for a while, and stops when they say it is not in
// their configuration.
func TestBinaryRemovedNodePlain(t *testing.T) {
	t.Parallel()
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	var gone *clusterProc
	for _, c := range procs {
		if c != l {
			gone = c
			break
		}
	}
	gone.cmd.Process.Signal(syscall.SIGKILL)
	<-gone.log.waited
	gone.log.waited <- nil
	if code, out := batonCluster(t, "cluster", "-ops-addr", l.opsAddr, "remove", gone.id); code != 0 {
		t.Fatalf("baton cluster remove %s: exit %d:\n%s", gone.id, code, out)
	}
	var peers []string
	for _, c := range procs {
		peers = append(peers, c.id+"="+c.raftAddr)
	}
	gone.start(t, strings.Join(peers, ","))
	select {
	case err := <-gone.log.waited:
		gone.log.waited <- err
		logged := gone.log.drain(t)
		if code := gone.cmd.ProcessState.ExitCode(); code != 1 ||
			!strings.Contains(logged, "this node was removed from the cluster: the other members say it is not in their configuration") {
			t.Errorf("the removed node started with its old data: exit %d, log:\n%s\nwant exit 1 and \"this node was removed from the cluster\"", code, lastLines(logged, 8))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the removed node, started with its old data, still runs after 60s:\n%s", lastLines(strings.Join(gone.log.seen, "\n"), 8))
	}
}
