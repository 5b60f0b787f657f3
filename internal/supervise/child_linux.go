package supervise

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// setParentDeathSignal has the kernel kill the command if baton run dies
// without stopping it (SIGKILL, a crash): its lock is gone with baton run's
// connection. Only the command gets it, not what it started.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// groupHasLiveMember reports whether a process of group pgid is not a
// zombie, from /proc. If /proc cannot be read it says true: the group
// exists, as kill told.
func groupHasLiveMember(pgid int) bool {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true
	}
	want := []byte(strconv.Itoa(pgid))
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // it ended while we looked
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || !bytes.Equal(f[2], want) {
			continue
		}
		if st := f[0]; len(st) == 1 && (st[0] == 'Z' || st[0] == 'X') {
			continue
		}
		return true
	}
	return false
}

// Start starts the command under a watchdog (watchdog_linux.go)
// that keeps the lock's promise for the command's whole process tree, even
// if baton run is killed with SIGKILL. It returns once the command runs.
func Start(cmd *exec.Cmd, grace time.Duration, verbose bool) (*Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find baton's own binary for the watchdog: %w", err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, err
	}
	v := "0"
	if verbose {
		v = "1"
	}
	w := exec.Command(self, append([]string{WatchdogArg, grace.String(), v, cmd.Path}, cmd.Args...)...)
	w.Env = cmd.Env
	w.Stdin, w.Stdout, w.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	w.ExtraFiles = []*os.File{lifeR, statusW} // fds 3 and 4
	// A group of its own: signals meant for baton run's group (the
	// terminal's Ctrl-C) do not reach it; baton run passes them on.
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w.WaitDelay = commandWaitDelay
	err = w.Start()
	lifeR.Close()
	statusW.Close()
	if err != nil {
		statusR.Close()
		lifeW.Close()
		return nil, err
	}
	line, _ := bufio.NewReader(statusR).ReadString('\n')
	statusR.Close()
	var pid, errno int
	switch {
	case scan(line, "ok %d\n", &pid):
	case scan(line, "err %d\n", &errno):
		lifeW.Close()
		w.Wait()
		return nil, &os.PathError{Op: "fork/exec", Path: cmd.Path, Err: syscall.Errno(errno)}
	default:
		lifeW.Close()
		w.Wait()
		return nil, fmt.Errorf("the watchdog did not start the command (it said %q)", line)
	}
	ch := &Child{pid: pid, watchdog: w.Process.Pid, lifeline: lifeW, exited: make(chan struct{})}
	go func() {
		w.Wait() // the status is in ProcessState; ErrWaitDelay only cut copying short
		ch.state = w.ProcessState
		ch.closeLifeline()
		close(ch.exited)
	}()
	return ch, nil
}

// scan is fmt.Sscanf that says only whether all of format matched.
func scan(s, format string, args ...any) bool {
	n, err := fmt.Sscanf(s, format, args...)
	return err == nil && n == len(args)
}
