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
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"
)

// Env names the directory the profiles are written to.
const Env = "BENCH_PROFILE_DIR"

// Install starts the signal handler if Env is set. Its goroutine lives as
// long as the process.
func Install() {
	dir := os.Getenv(Env)
	if dir == "" {
		return
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go serve(dir, ch)
}

func serve(dir string, ch <-chan os.Signal) {
	final := filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", os.Getpid()))
	var f *os.File
	for sig := range ch {
		switch {
		case sig == syscall.SIGUSR1 && f == nil:
			var err error
			if f, err = os.Create(final + ".part"); err != nil {
				f = nil
				continue
			}
			if pprof.StartCPUProfile(f) != nil {
				f.Close()
				f = nil
			}
		case sig == syscall.SIGUSR2 && f != nil:
			pprof.StopCPUProfile()
			f.Close()
			f = nil
			os.Rename(final+".part", final)
		}
	}
}

// MainSource is Install and serve as a file of package main, for the
// overlay that builds a profiling cmd/baton.
const MainSource = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
)

// Written by the bench's build overlay (bench/internal/profsig): CPU
// profiles between SIGUSR1 and SIGUSR2.
func init() {
	dir := os.Getenv("` + Env + `")
	if dir == "" {
		return
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		final := filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", os.Getpid()))
		var f *os.File
		for sig := range ch {
			switch {
			case sig == syscall.SIGUSR1 && f == nil:
				var err error
				if f, err = os.Create(final + ".part"); err != nil {
					f = nil
					continue
				}
				if pprof.StartCPUProfile(f) != nil {
					f.Close()
					f = nil
				}
			case sig == syscall.SIGUSR2 && f != nil:
				pprof.StopCPUProfile()
				f.Close()
				f = nil
				os.Rename(final+".part", final)
			}
		}
	}()
}
`

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
