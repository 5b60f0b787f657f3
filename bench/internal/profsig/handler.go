package profsig

// This file is compiled into the bench (Install) and, with its package
// clause made main, into cmd/baton by the bench's build overlay
// (MainSource): keep it to the standard library.

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
)

// Env names the directory the profiles are written to.
const Env = "BENCH_PROFILE_DIR"

// Install starts the signal handler if Env is set: a CPU profile between
// SIGUSR1 and SIGUSR2. Its goroutine lives as long as the process.
func Install() {
	dir := os.Getenv(Env)
	if dir == "" {
		return
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go serveProfiles(dir, ch)
}

func serveProfiles(dir string, ch <-chan os.Signal) {
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
