// Package supervise runs baton run's command so that it never runs on
// without the lock: the command leads a process group of its own, a signal
// reaches the whole group, and what it leaves running is found and
// stopped. On Linux a watchdog (watchdog_linux.go), baton's own binary
// started again, keeps that promise for the whole process tree even if
// baton run is killed with SIGKILL or stops running. The lock itself, and
// when to stop the command, are the caller's (internal/cli).
package supervise

import (
	"os"
	"syscall"
)

// Exit statuses of the watchdog when it does not pass on the command's.
const (
	exitFailure    = 1
	exitCannotExec = 126 // the command exists but cannot be executed (as in sh)
)

// Pid is the command's process id, also its process group's.
func (c *Child) Pid() int { return c.pid }

// Exited is closed once the command (or its watchdog) has been waited for.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// SignalName is the conventional name of sig: SIGTERM rather than
// "terminated".
func SignalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	if name := platformSignalName(sig); name != "" {
		return name
	}
	return sig.String()
}
