//go:build unix && !linux

package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// setParentDeathSignal does nothing: only Linux has a parent-death signal.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// groupHasLiveMember trusts kill, which found the group: zombies count.
func groupHasLiveMember(int) bool { return true }

// Start starts the command as the leader of a process group of its
// own. Without a subreaper or a parent-death signal, this is all there is
// here: a process that leaves the group (setsid) is not stopped, and if
// baton run is killed with SIGKILL the command runs on without the lock.
func Start(cmd *exec.Cmd, _ time.Duration, _ bool) (*Child, error) {
	return startGroupChild(cmd)
}

// WatchdogArg names the watchdog, which exists only on Linux.
const WatchdogArg = "__baton-run-watchdog"

// RunWatchdog refuses: there is no watchdog here.
func RunWatchdog([]string) int {
	fmt.Fprintln(os.Stderr, "baton run: the watchdog exists only on Linux")
	return exitFailure
}

// writeDeadline does nothing: there is no watchdog here.
func writeDeadline(*os.File, time.Time) error { return nil }
