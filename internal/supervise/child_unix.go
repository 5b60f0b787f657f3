//go:build unix

package supervise

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Supported says whether baton run can run here.
const Supported = true

// ForwardedSignals are passed on to the command's process group.
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// RefusedSignals are caught and not acted on. The default action of SIGTSTP
// would stop baton run, and with it the heartbeats, while the command (in
// a group of its own, which the terminal does not stop) runs on.
var RefusedSignals = []os.Signal{syscall.SIGTSTP}

// platformSignalName names the signals that only Unix has, for sigName.
func platformSignalName(sig os.Signal) string {
	if sig == syscall.SIGTSTP {
		return "SIGTSTP"
	}
	return ""
}

// commandWaitDelay bounds how long Wait waits for the command's output to
// be copied after it exited. It matters only when stdout or stderr is not
// a file (in-process tests): a process left in the group could otherwise
// hold the pipe, and Wait, open until it exits.
const commandWaitDelay = time.Second

// groupPoll is how often awaitGroup looks whether a process group is
// empty: there is no event to wait for.
const groupPoll = 20 * time.Millisecond

// Child is the command, the leader of a process group of its own, or, on
// Linux, the watchdog that runs it (watchdog_linux.go).
type Child struct {
	pid    int           // the command's; also its group's id
	exited chan struct{} // closed once the command (or its watchdog) has been waited for
	state  *os.ProcessState

	// With a watchdog: its pid, to which signals go (it passes them on to
	// the whole tree), and the write end of its lifeline, closed for
	// SIGKILL. Nil lifeline: no watchdog.
	watchdog     int
	lifeline     *os.File
	lifelineOnce sync.Once
	// lifelineMu keeps a deadline's write from racing the close.
	lifelineMu     sync.Mutex
	lifelineClosed bool
}

// closeLifeline closes the lifeline once: the watchdog SIGKILLs the tree.
func (c *Child) closeLifeline() {
	c.lifelineOnce.Do(func() {
		c.lifelineMu.Lock()
		defer c.lifelineMu.Unlock()
		c.lifelineClosed = true
		c.lifeline.Close()
	})
}

// startGroupChild starts cmd as the leader of a new process group, so that
// one signal reaches everything it starts, and returns once it runs.
func startGroupChild(cmd *exec.Cmd) (*Child, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	cmd.WaitDelay = commandWaitDelay
	ch := &Child{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is tied to the thread that forked, not
		// the process: keep that thread until the command has been reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		ch.pid = cmd.Process.Pid
		started <- nil
		cmd.Wait() // the status is in ProcessState; ErrWaitDelay only cut copying short
		ch.state = cmd.ProcessState
		close(ch.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ch, nil
}

// Signal sends sig to the command's whole process group, or with a
// watchdog to its whole tree: SIGKILL by cutting the lifeline, any other
// signal through the watchdog, which passes it on.
func (c *Child) Signal(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	switch {
	case !ok:
	case c.lifeline != nil && s == syscall.SIGKILL:
		c.closeLifeline()
	case c.lifeline != nil:
		syscall.Kill(c.watchdog, s) // ESRCH: it is gone already, and the tree with it
	default:
		syscall.Kill(-c.pid, s) // ESRCH: the group is gone already
	}
}

// SetDeadline tells the watchdog, if there is one, that the lock holds
// until validUntil: past it without a newer one, the watchdog stops the
// command itself (watchdog_linux.go).
func (c *Child) SetDeadline(validUntil time.Time) {
	if c.lifeline == nil {
		return
	}
	c.lifelineMu.Lock()
	defer c.lifelineMu.Unlock()
	if !c.lifelineClosed {
		writeDeadline(c.lifeline, validUntil) // EPIPE: the watchdog is gone, and the tree with it
	}
}

// ExitCode is the command's status as a shell reports it: its exit code,
// or 128+N if signal N killed it. Only after exited is closed.
func (c *Child) ExitCode() int {
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return c.state.ExitCode()
}

// GroupAlive reports whether a process of the command's group still runs.
// Zombies do not count: where PID 1 does not reap orphans, they stay.
func (c *Child) GroupAlive() bool {
	if c.lifeline != nil {
		// The watchdog exits only once the whole tree is gone.
		select {
		case <-c.exited:
			return false
		default:
			return true
		}
	}
	if err := syscall.Kill(-c.pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	return groupHasLiveMember(c.pid)
}

// AwaitGroup waits until no process of the group runs, or until deadline;
// false if some still run then.
func (c *Child) AwaitGroup(deadline time.Time) bool {
	for c.GroupAlive() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(groupPoll, time.Until(deadline)))
	}
	return true
}
