package supervise

// The watchdog keeps baton run's promise for the command's whole process
// tree, on Linux, even if baton run is killed with SIGKILL.
//
// baton run starts itself again as the watchdog (WatchdogArg), and the
// watchdog starts the command. The watchdog is a child subreaper
// (PR_SET_CHILD_SUBREAPER): every process the command starts stays its
// descendant, whether it leaves the process group, calls setsid or
// double-forks, because an orphan is re-parented to the nearest subreaper
// instead of PID 1. It holds the read end of a pipe whose only write end
// baton run holds (the lifeline): when that end closes, because baton run
// wants SIGKILL for the command or because baton run died, however it
// died, the watchdog SIGKILLs every descendant and reaps them before it
// exits. It ignores the signals baton run forwards (it passes them on to
// every descendant) and has a process group of its own, so only the
// lifeline and SIGKILL end it; if it is killed itself, the command's
// parent-death signal takes the command with it.
//
// The lifeline also carries the lock's deadline: baton run writes a line
// "until NS" (CLOCK_BOOTTIME nanoseconds, the clock both processes read,
// which counts a suspend of the machine as the lock's deadline does)
// each time a confirmed heartbeat moves it. If the deadline passes before
// a later one comes, baton run is not running (kill -STOP, a stopped
// debugger, a machine too busy to schedule it) and cannot stop the command
// itself: the watchdog does, SIGTERM to the tree and SIGKILL after the
// grace, as baton run would have. So the command is gone at 0.8 × lease +
// grace whether or not baton run runs. (The lock was lost then: baton run,
// once it runs again, finds the loss and exits 77.)
//
// Why not the alternatives: a parent-death signal reaches only the direct
// child; a process group is left by setsid; a cgroup needs a delegated
// cgroup v2 hierarchy that many hosts and containers do not give to an
// unprivileged baton run. A subreaper needs no privilege and no set-up.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WatchdogArg, as the first argument, makes the binary the watchdog of one
// baton run: WatchdogArg GRACE VERBOSE PATH ARGV0 [ARGS...], with the
// lifeline on fd 3 and the status pipe on fd 4.
const WatchdogArg = "__baton-run-watchdog"

const (
	lifelineFD = 3
	statusFD   = 4
)

// RunWatchdog is the watchdog's main; it returns the exit status: the
// command's (128+N if signal N ended it).
func RunWatchdog(args []string) int {
	// The command's parent-death signal is tied to the thread that forks it.
	runtime.LockOSThread()
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "baton run watchdog: bad arguments")
		return exitFailure
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "baton run watchdog: bad grace %q\n", args[0])
		return exitFailure
	}
	verbose := args[1] == "1"
	path, argv := args[2], args[3:]
	syscall.CloseOnExec(lifelineFD)
	syscall.CloseOnExec(statusFD)
	status := os.NewFile(statusFD, "status")
	lifeline := os.NewFile(lifelineFD, "lifeline")
	logf := func(format string, a ...any) {
		if verbose {
			fmt.Fprintf(os.Stderr, "baton run: "+format+"\n", a...)
		}
	}

	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(status, "err %d\n", errnoOf(err))
		return exitCannotExec
	}
	// Caught, not ignored: an ignored signal stays ignored across exec, and
	// the command must get the default actions.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, ForwardedSignals...)
	signal.Notify(sigs, syscall.SIGTSTP) // refused, as by baton run

	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		fmt.Fprintf(status, "err %d\n", errnoOf(err))
		return exitCannotExec
	}
	fmt.Fprintf(status, "ok %d\n", proc.Pid)
	status.Close()
	w := &watchdog{self: os.Getpid(), cmd: proc.Pid}

	// The reaper reaps every child: the command, and each orphan that the
	// subreaper inherits. ECHILD means the whole tree is gone.
	type reaped struct {
		pid int
		ws  syscall.WaitStatus
	}
	exits := make(chan reaped, 64)
	go func() {
		defer close(exits)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return
			}
			exits <- reaped{pid, ws}
		}
	}()
	cut := make(chan struct{})
	deadlines := make(chan int64, 1) // each new deadline, CLOCK_BOOTTIME nanoseconds
	go func() {
		readLifeline(lifeline, deadlines) // EOF: baton run closed it, or died
		close(cut)
	}()

	code := -1 // the command's status, once it has exited
	var graceC <-chan time.Time
	killed, terminated := false, false
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	var until int64 // the lock's deadline; 0 before the first
	for {
		select {
		case until = <-deadlines:
			deadline.Reset(untilWait(until))
		case <-deadline.C:
			if left := until - bootNow(); left > 0 {
				// The timer counts the monotonic clock, which stops while
				// the machine is suspended: look again at the boot clock.
				deadline.Reset(untilWait(until))
				continue
			}
			if !terminated && !killed && code < 0 {
				// baton run did not move the deadline in time: it is
				// stopped or starved, and the lock is lost by now.
				fmt.Fprintf(os.Stderr, "baton run: the lock's deadline passed with baton run not running (stopped?); the watchdog stops the command (SIGTERM, SIGKILL after %v)\n", grace)
				w.signalAll(syscall.SIGTERM)
				terminated = true
				graceC = time.After(grace)
			}
		case r, ok := <-exits:
			if !ok {
				if code < 0 {
					code = 128 + int(syscall.SIGKILL)
				}
				return code
			}
			if r.pid != w.cmd {
				continue
			}
			if r.ws.Signaled() {
				code = 128 + int(r.ws.Signal())
			} else {
				code = r.ws.ExitStatus()
			}
			if !killed && len(w.descendants()) > 0 {
				logf("stopping what the command left running (SIGTERM, SIGKILL after %v)", grace)
				w.signalAll(syscall.SIGTERM)
				graceC = time.After(grace)
			}
		case <-graceC:
			graceC = nil
			logf("processes the command started still run %v after SIGTERM; sending SIGKILL", grace)
			w.killAll()
			killed = true
		case <-cut:
			cut = nil
			deadline.Stop()
			w.killAll()
			killed = true
		case sig := <-sigs:
			if sig != syscall.SIGTSTP {
				w.signalAll(sig.(syscall.Signal))
			}
		}
		if killed {
			// SIGKILL again whatever forked since; each orphan comes to us.
			if len(w.descendants()) > 0 {
				w.killAll()
			}
		}
	}
}

// deadlineRecheck bounds each wait for the deadline: a timer runs on the
// monotonic clock, which stops while the machine is suspended, so the
// watchdog looks at the boot clock at least this often.
const deadlineRecheck = 250 * time.Millisecond

// untilWait is how long to wait before looking at deadline until again.
func untilWait(until int64) time.Duration {
	return min(max(time.Duration(until-bootNow()), 0), deadlineRecheck)
}

// readLifeline reads baton run's deadline lines from the lifeline until
// EOF, sending each deadline on out.
func readLifeline(lifeline io.Reader, out chan int64) {
	sc := bufio.NewScanner(lifeline)
	for sc.Scan() {
		var ns int64
		if !scan(sc.Text()+"\n", "until %d\n", &ns) {
			continue
		}
		select { // the newest replaces one not yet taken
		case <-out:
		default:
		}
		out <- ns
	}
}

// bootNow is CLOCK_BOOTTIME in nanoseconds: the clock that baton run and
// the watchdog both read; like the lock's own deadline (clients/go/clock)
// it keeps counting while the machine is suspended.
func bootNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return ts.Nano()
}

// writeDeadline tells the watchdog on lifeline that the lock holds until
// validUntil (baton run's side of readLifeline). The clock is read before
// the remaining time: a pause between the two makes the deadline sent
// earlier, never later.
func writeDeadline(lifeline *os.File, validUntil time.Time) error {
	now := bootNow()
	left := time.Until(validUntil)
	_, err := fmt.Fprintf(lifeline, "until %d\n", now+int64(max(left, 0)))
	return err
}

// watchdog is the state of one command's tree.
type watchdog struct {
	self int // the watchdog's pid
	cmd  int // the command's pid, also its process group
}

// signalAll sends sig to the command's process group and to every other
// descendant (those that left the group).
func (w *watchdog) signalAll(sig syscall.Signal) {
	syscall.Kill(-w.cmd, sig)
	for _, pid := range w.descendants() {
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != w.cmd {
			syscall.Kill(pid, sig)
		}
	}
}

// killAll SIGKILLs every descendant. A process forked meanwhile is caught by
// the next call: the loop calls it until the reaper finds no child.
func (w *watchdog) killAll() {
	syscall.Kill(-w.cmd, syscall.SIGKILL)
	for _, pid := range w.descendants() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// descendants lists the live processes below the watchdog, from /proc.
func (w *watchdog) descendants() []int {
	parents := procParents()
	var out []int
	seen := map[int]bool{w.self: true}
	frontier := []int{w.self}
	for len(frontier) > 0 {
		var next []int
		for pid, ppid := range parents {
			if seen[pid] {
				continue
			}
			for _, f := range frontier {
				if ppid == f {
					seen[pid] = true
					next = append(next, pid)
					out = append(out, pid)
					break
				}
			}
		}
		frontier = next
	}
	return out
}

// procParents maps each live (not zombie) process to its parent.
func procParents() map[int]int {
	out := make(map[int]int)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		state, ppid, ok := parseStat(b)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		out[pid] = ppid
	}
	return out
}

// parseStat reads the state and the parent of /proc/PID/stat: pid (comm)
// state ppid ..., where comm may hold spaces and parentheses.
func parseStat(b []byte) (state byte, ppid int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 >= len(b) {
		return 0, 0, false
	}
	rest := b[i+2:]
	state = rest[0]
	j := 2
	for j < len(rest) && rest[j] != ' ' {
		j++
	}
	ppid, err := strconv.Atoi(string(rest[2:j]))
	return state, ppid, err == nil
}

// errnoOf is the errno in err, or EINVAL.
func errnoOf(err error) int {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return int(errno)
	}
	return int(syscall.EINVAL)
}
