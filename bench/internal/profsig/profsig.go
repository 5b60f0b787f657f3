// Package profsig takes CPU profiles of a running child process over a
// window the bench chooses: with BENCH_PROFILE_DIR set in its environment,
// the child starts a CPU profile on SIGUSR1 and writes it, on SIGUSR2, to
// $BENCH_PROFILE_DIR/cpu-PID.pprof. The floor server installs it with
// Install; Baton gets the same code compiled into cmd/baton through a
// build overlay (MainSource), so the binary measured is otherwise the
// product's own and nothing in the product carries a profiling hook.
package profsig

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

//go:embed handler.go
var handlerSource string

// MainSource is handler.go as a file of package main that installs the
// handler at start, for the overlay that builds a profiling cmd/baton.
var MainSource = strings.Replace(handlerSource, "package profsig", "package main", 1) +
	"\nfunc init() { Install() }\n"

// A Capture is a profile being taken of one process.
type Capture struct {
	pid  int
	dir  string
	dest string
}

// Start begins a profile of pid, which must have the handler installed
// and Env set to dir; Stop writes it to dest.
func Start(pid int, dir, dest string) (*Capture, error) {
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return nil, fmt.Errorf("start profile of pid %d: %w", pid, err)
	}
	return &Capture{pid: pid, dir: dir, dest: dest}, nil
}

// Stop ends the profile and moves it to its destination once the process
// has written it (within 10 s).
func (c *Capture) Stop() error {
	if err := syscall.Kill(c.pid, syscall.SIGUSR2); err != nil {
		return fmt.Errorf("stop profile of pid %d: %w", c.pid, err)
	}
	src := filepath.Join(c.dir, fmt.Sprintf("cpu-%d.pprof", c.pid))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := os.Rename(src, c.dest); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d wrote no profile to %s within 10 s", c.pid, src)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Top is `go tool pprof -top` of the profile at file for the binary bin,
// its first n entries by flat time and then by cumulative time.
func Top(ctx context.Context, bin, file string, n int) (string, error) {
	var out []byte
	for _, order := range [][]string{nil, {"-cum"}} {
		args := append([]string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", n)}, order...)
		b, err := exec.CommandContext(ctx, "go", append(args, bin, file)...).Output()
		if err != nil {
			return "", fmt.Errorf("go tool pprof -top %s: %w", file, err)
		}
		out = append(append(out, b...), '\n')
	}
	return string(out), nil
}
