package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// pythonClaim holds a claim with the Python client until its stdin closes.
// It prints "held TOKEN SHARED LIMIT", or "mismatch LIMIT" for
// LIMIT_MISMATCH.
const pythonClaim = `
import os, sys, baton
c = baton.Client(os.environ["ADDRS"].split(","), lease=2.0)
try:
    with c.lock(os.environ["NAME"], limit=int(os.environ["LIMIT"])) as held:
        print(f"held {held.token} {held.shared} {held.limit}", flush=True)
        sys.stdin.read()
except baton.LimitMismatch as e:
    print(f"mismatch {e.limit}", flush=True)
`

// nodeClaim is pythonClaim with the TypeScript client.
const nodeClaim = `
const { Client, LimitMismatchError } = await import(process.env.CLIENT);
const c = new Client(process.env.ADDRS.split(","), { leaseMs: 2000 });
try {
  const held = await c.acquire(process.env.NAME, { limit: Number(process.env.LIMIT) });
  console.log("held " + held.token + " " + held.shared + " " + held.limit);
  process.stdin.resume();
  await new Promise((r) => process.stdin.on("end", r));
  await held.release();
} catch (e) {
  if (!(e instanceof LimitMismatchError)) throw e;
  console.log("mismatch " + e.limit);
}
`

// clientProc is a claim held by another language's client in a process of
// its own.
type clientProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startClientProc(t *testing.T, cmd *exec.Cmd) *clientProc {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &clientProc{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		cmd.Wait()
		if stderr.Len() > 0 {
			p.lines <- "stderr: " + stderr.String()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range p.lines {
		}
	})
	return p
}

// line waits for the process's next line of output.
func (p *clientProc) line(t *testing.T, what string) string {
	t.Helper()
	select {
	case s, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s: the process ended without a word", what)
		}
		return s
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing within 30 s", what)
	}
	return ""
}

// heldToken reads a "held TOKEN SHARED LIMIT" line, checking the kind.
func heldToken(t *testing.T, line, who string, limit int) uint64 {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "held" || !strings.EqualFold(f[2], "true") || f[3] != strconv.Itoa(limit) {
		t.Fatalf("%s: %q, want held TOKEN true %d", who, line, limit)
	}
	tok, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("%s: token %q: %v", who, f[1], err)
	}
	return tok
}

func clientCommands(t *testing.T) (python, node func(addrs, name string, limit int) *exec.Cmd) {
	t.Helper()
	for _, bin := range []string{"python3", "node"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed: the Python and TypeScript clients cannot run (CI=%s)", bin, os.Getenv("CI"))
			}
			t.Skipf("SKIPPED: %s is not installed (apt-get install python3 nodejs), so the Python and TypeScript clients did not run", bin)
		}
	}
	pyPath, err := filepath.Abs("../../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	tsEntry, err := filepath.Abs("../../clients/typescript/dist/esm.mjs")
	if err != nil {
		t.Fatal(err)
	}
	env := func(cmd *exec.Cmd, addrs, name string, limit int) *exec.Cmd {
		cmd.Env = append(os.Environ(), "ADDRS="+addrs, "NAME="+name, "LIMIT="+strconv.Itoa(limit),
			"PYTHONPATH="+pyPath, "CLIENT=file://"+tsEntry)
		return cmd
	}
	python = func(addrs, name string, limit int) *exec.Cmd {
		return env(exec.Command("python3", "-c", pythonClaim), addrs, name, limit)
	}
	node = func(addrs, name string, limit int) *exec.Cmd {
		return env(exec.Command("node", "--input-type=module", "-e", nodeClaim), addrs, name, limit)
	}
	return python, node
}

// TestClusterSemaphoreEveryClient: on a real 3-node cluster, given every
// node's address (followers first: each client follows NOT_LEADER's hint),
// the Go client, `baton run -limit`, the Python client and the TypeScript
// client share a semaphore of 3: three hold at once, each with its own
// rising token, the fourth waits until one leaves, and a claim that gives
// another limit is refused with the limit in force, at once. After kill -9
// of the leader every holder is told of the loss, and the semaphore is
// granted again on the new leader with larger tokens.
func TestClusterSemaphoreEveryClient(t *testing.T) {
	t.Parallel()
	python, node := clientCommands(t)
	procs := newClusterProcs(t)
	l := waitLeader(t, procs)
	addrs := leaderLast(procs, l)
	list := strings.Join(addrs, ",")
	const name, limit = "pool", 3

	client, err := baton.New(addrs, baton.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	goLock, err := client.Acquire(ctx, name, baton.WithLimit(limit))
	if err != nil {
		t.Fatalf("Go client, WithLimit(%d): %v", limit, err)
	}
	if !goLock.Shared() || goLock.Limit() != limit {
		t.Fatalf("Go client's lock: shared %v, limit %d; want a slot of %d", goLock.Shared(), goLock.Limit(), limit)
	}
	tokens := []uint64{goLock.Token()}

	dir := t.TempDir()
	run := startLogged(t, batonCmd(t, "run", "-addr", list, "-lease", "2s", "-limit", strconv.Itoa(limit), name, "--",
		"sh", "-c", `echo "$BATON_TOKEN" >"$0/run.tmp" && mv "$0/run.tmp" "$0/run" && exec sleep 60`, dir))
	tokens = append(tokens, waitTokenFile(t, filepath.Join(dir, "run"), run))

	py := startClientProc(t, python(list, name, limit))
	tokens = append(tokens, heldToken(t, py.line(t, "Python client, limit=3"), "Python client", limit))
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens of the semaphore's holders %v, want each above the one before", tokens)
		}
	}
	if n := opsHolders(l.opsAddr, name); n != limit {
		t.Fatalf("the leader's ops API shows %d holders of %s, want %d", n, name, limit)
	}

	// The semaphore is full: the TypeScript client waits, then takes the
	// slot the Python client leaves.
	ts := startClientProc(t, node(list, name, limit))
	waitQueued(t, l.opsAddr, name, "the TypeScript client's claim")
	select {
	case s := <-ts.lines:
		t.Fatalf("the TypeScript client got in while 3 of 3 slots were held: %q", s)
	default:
	}
	py.stdin.Close()
	tsToken := heldToken(t, ts.line(t, "TypeScript client, limit: 3"), "TypeScript client", limit)
	if tsToken <= tokens[len(tokens)-1] {
		t.Fatalf("TypeScript client's token %d, want above %v", tsToken, tokens)
	}

	// Another limit for the name is refused at once, in every client.
	for _, c := range []struct {
		who string
		cmd *exec.Cmd
	}{{"Python client", python(list, name, 2)}, {"TypeScript client", node(list, name, 2)}} {
		p := startClientProc(t, c.cmd)
		if s := p.line(t, c.who+", limit 2"); s != fmt.Sprintf("mismatch %d", limit) {
			t.Fatalf("%s with limit 2 beside a semaphore of %d: %q, want mismatch %d", c.who, limit, s, limit)
		}
	}
	_, err = client.Acquire(ctx, name, baton.WithLimit(2))
	var mismatch *baton.LimitMismatchError
	if !errors.As(err, &mismatch) || mismatch.Limit != limit {
		t.Fatalf("Go client with limit 2 beside a semaphore of %d: %v, want LimitMismatchError with the limit %d", limit, err, limit)
	}
	mismatchRun := batonCmd(t, "run", "-addr", list, "-limit", "2", name, "--", "true")
	if out, err := mismatchRun.CombinedOutput(); mismatchRun.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), strconv.Itoa(limit)) {
		t.Fatalf("baton run -limit 2 beside a semaphore of %d: %v, %s; want exit 2 naming the limit", limit, err, out)
	}

	// kill -9 of the leader: every holder is told.
	l.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-goLock.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Go client's slot not lost 15 s after its leader died")
	}
	select {
	case err := <-run.waited:
		run.waited <- err
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 77 {
			t.Fatalf("baton run -limit after kill -9 of the leader: %v, want exit 77 (lock lost)", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("baton run -limit still running 15 s after its leader died")
	}

	// On the new leader, after its grace, slots are granted with larger
	// tokens.
	again, err := client.Acquire(ctx, name, baton.WithLimit(limit))
	if err != nil {
		t.Fatalf("Go client after the failover: %v", err)
	}
	defer again.Release()
	if again.Token() <= tsToken {
		t.Fatalf("token after the failover %d, want above %d", again.Token(), tsToken)
	}
}
