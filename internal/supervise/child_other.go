//go:build !unix

package supervise

import (
	"errors"
	"os"
	"os/exec"
	"time"
)

// Supported says whether baton run can run here: it needs
// Unix process groups and signals.
const Supported = false

var (
	ForwardedSignals = []os.Signal{os.Interrupt}
	RefusedSignals   []os.Signal
)

func platformSignalName(os.Signal) string { return "" }

type Child struct {
	pid    int
	exited chan struct{}
}

func Start(*exec.Cmd, time.Duration, bool) (*Child, error) {
	return nil, errors.New("process groups are not supported on this platform")
}

func (c *Child) Signal(os.Signal)          {}
func (c *Child) SetDeadline(time.Time)     {}
func (c *Child) ExitCode() int             { return exitFailure }
func (c *Child) GroupAlive() bool          { return false }
func (c *Child) AwaitGroup(time.Time) bool { return true }

// WatchdogArg names the watchdog, which exists only on Linux.
const WatchdogArg = "__baton-run-watchdog"

// RunWatchdog refuses: there is no watchdog here.
func RunWatchdog([]string) int { return exitFailure }
