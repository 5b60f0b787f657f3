package fence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/fence"
)

// childEnv set makes the test binary a lock holder: a real process that
// a test can stop with SIGSTOP and kill.
const childEnv = "BATON_FENCE_CHILD"

// runChild holds the lock and works on the counter, one round per line
// of stdin, and says what happens on stdout:
//
//	granted TOKEN      the lock is held
//	holding N          begin read N (after the fence's check, if fenced)
//	refused ERROR      begin or the write was refused as stale
//	accepted           the write of N+1 was accepted
//	error ERROR        anything else
//
// After "holding", it waits for a line: "write" writes N+1 whatever the
// lock's state (a write already on its way when the lock was lost), and
// anything else, or the end of stdin, ends it. BATON_FENCE_ROUNDS rounds,
// then it exits.
func runChild() int {
	fenced := os.Getenv("FENCED") == "1"
	k, err := newKit(os.Getenv("KIT"), os.Getenv("ADDR"), fenced)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer k.close()
	lease, _ := time.ParseDuration(os.Getenv("LEASE"))
	c, err := baton.New([]string{os.Getenv("BATON_ADDR")}, baton.WithLease(lease), baton.WithOwner(os.Getenv("WRITER")))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	rounds, _ := strconv.Atoi(os.Getenv(childEnv))
	in := bufio.NewScanner(os.Stdin)
	ctx := context.Background()
	for range rounds {
		l, err := c.Acquire(ctx, lockName)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("granted", l.Token())
		n, err := k.begin(ctx, l)
		switch {
		case errors.Is(err, fence.ErrStale):
			fmt.Println("refused", oneLine(err))
			l.Release()
			continue
		case err != nil:
			fmt.Println("error", oneLine(err))
			return 1
		}
		fmt.Println("holding", n)
		if !in.Scan() || in.Text() != "write" {
			return 0
		}
		switch err := k.write(ctx, l, n+1, os.Getenv("WRITER")); {
		case errors.Is(err, fence.ErrStale):
			fmt.Println("refused", oneLine(err))
		case err != nil:
			fmt.Println("error", oneLine(err))
			return 1
		default:
			fmt.Println("accepted")
		}
		l.Release()
	}
	return 0
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// child is a holder process seen from the test.
type child struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  *os.File
	events chan<- childLine
	exited chan struct{}
	stop   chan struct{} // closed when the test no longer reads events
}

// childLine is one line a child wrote.
type childLine struct {
	c    *child
	verb string
	arg  string
}

// startChild starts a holder named writer that plays rounds rounds
// against res, sending its lines to events.
func startChild(t *testing.T, batonAddr string, res resource, fenced bool, writer string, rounds int, lease time.Duration, events chan<- childLine) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	f := "0"
	if fenced {
		f = "1"
	}
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(rounds), "FENCED="+f, "WRITER="+writer,
		"LEASE="+lease.String(), "BATON_ADDR="+batonAddr)
	cmd.Env = append(cmd.Env, res.env()...)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = stdinR
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdinR.Close()
	c := &child{t: t, name: writer, cmd: cmd, stdin: stdinW, events: events, exited: make(chan struct{}), stop: make(chan struct{})}
	go func() { // ends when the child has exited
		defer close(c.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			verb, arg, _ := strings.Cut(sc.Text(), " ")
			select {
			case events <- childLine{c: c, verb: verb, arg: arg}:
			case <-c.stop:
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		close(c.stop)
		c.stdin.Close()
		c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("child %s did not exit 10s after SIGKILL", c.name)
		}
	})
	return c
}

func (c *child) send(line string) {
	if _, err := fmt.Fprintln(c.stdin, line); err != nil {
		c.t.Errorf("child %s: %v", c.name, err)
	}
}

func (c *child) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("child %s: %v: %v", c.name, sig, err)
	}
}

// next is the next line of events, failing the test after 30s.
func next(t *testing.T, events <-chan childLine) childLine {
	t.Helper()
	select {
	case e := <-events:
		if e.verb == "error" {
			t.Fatalf("child %s: %s", e.c.name, e.arg)
		}
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("no line from any holder within 30s")
		return childLine{}
	}
}

// expect is the next line, which must be verb from c.
func expect(t *testing.T, events <-chan childLine, c *child, verb string) string {
	t.Helper()
	e := next(t, events)
	if e.c != c || e.verb != verb {
		t.Fatalf("got %s %s from %s, want %s from %s", e.verb, e.arg, e.c.name, verb, c.name)
	}
	return e.arg
}
