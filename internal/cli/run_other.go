//go:build !unix

package cli

import (
	"errors"
	"os"
	"os/exec"
	"time"
)

// processGroupsSupported says whether baton run can run here: it needs
// Unix process groups and signals.
const processGroupsSupported = false

var (
	forwardedSignals = []os.Signal{os.Interrupt}
	refusedSignals   []os.Signal
)

func platformSignalName(os.Signal) string { return "" }

type child struct {
	pid    int
	exited chan struct{}
}

func startChild(*exec.Cmd, time.Duration, bool) (*child, error) {
	return nil, errors.New("process groups are not supported on this platform")
}

func (c *child) signal(os.Signal)          {}
func (c *child) setDeadline(time.Time)     {}
func (c *child) exitCode() int             { return exitFailure }
func (c *child) groupAlive() bool          { return false }
func (c *child) awaitGroup(time.Time) bool { return true }

// WatchdogArg names the watchdog, which exists only on Linux.
const WatchdogArg = "__baton-run-watchdog"

// RunWatchdog refuses: there is no watchdog here.
func RunWatchdog([]string) int { return exitFailure }
