package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/supervise"
)

// supervise runs the command while the lock is held, stops it when
// ownership ends, and releases the lock once it has exited. It returns the
// exit code.
func (r *runner) supervise(path string, lock *baton.Lock, stops <-chan os.Signal) int {
	o := r.cfg
	cmd := exec.Command(path, o.Command[1:]...)
	cmd.Args[0] = o.Command[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, r.cfg.Stdout, r.cfg.Stderr
	cmd.Env = append(os.Environ(),
		"BATON_LOCK="+o.Name,
		"BATON_TOKEN="+strconv.FormatUint(lock.Token(), 10))
	if err := lock.Err(); err != nil {
		// Lost between the grant and now: the command must not start.
		lock.Release()
		r.errorf("%v; not running the command", err)
		return ExitLockLost
	}
	ch, err := supervise.Start(cmd, o.KillGrace, o.Verbose)
	if err != nil {
		lock.Release()
		r.errorf("%s: %v", o.Command[0], unwrapExecError(err))
		if errors.Is(err, fs.ErrNotExist) {
			return ExitCmdNotFound
		}
		return ExitCannotExec
	}
	r.logf("running %s (pid %d) under %s", o.Command[0], ch.Pid(), o.Name)
	// The watchdog learns each new deadline of the lock, so that it stops
	// the command itself if baton run cannot (stopped, starved).
	lastDeadline := lock.ValidUntil()
	ch.SetDeadline(lastDeadline)
	deadlines := time.NewTicker(max(o.Lease/deadlineTellShare, 5*time.Millisecond))
	defer deadlines.Stop()

	var (
		lost     error // why ownership ended, if it did while the command ran
		termAt   time.Time
		grace    *time.Timer
		graceC   <-chan time.Time
		lockDone = lock.Done()
	)
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	terminate := func() {
		if !termAt.IsZero() {
			return
		}
		termAt = time.Now()
		ch.Signal(syscall.SIGTERM)
		grace = time.NewTimer(o.KillGrace)
		graceC = grace.C
	}
wait:
	for {
		select {
		case <-ch.Exited():
			break wait
		case <-deadlines.C:
			if v := lock.ValidUntil(); !v.IsZero() && !v.Equal(lastDeadline) {
				lastDeadline = v
				ch.SetDeadline(v)
			}
		case <-lockDone:
			lockDone = nil
			lost = lock.Err()
			r.errorf("%v; stopping the command (SIGTERM to its process group, SIGKILL after %v)", lost, o.KillGrace)
			terminate()
		case m := <-r.moves:
			r.logMove(m)
			// The move confirmed the lock anew: the watchdog learns the new
			// deadline now, not at the next tick (a move that lands just
			// before the old deadline must not have the command killed).
			if v := lock.ValidUntil(); !v.IsZero() && !v.Equal(lastDeadline) {
				lastDeadline = v
				ch.SetDeadline(v)
			}
		case sig := <-stops:
			if r.refused(sig) {
				continue
			}
			r.logf("passing %s on to the command", supervise.SignalName(sig))
			ch.Signal(sig)
		case <-graceC:
			graceC = nil
			r.errorf("the command still runs %v after SIGTERM (-kill-grace); sending SIGKILL", o.KillGrace)
			ch.Signal(syscall.SIGKILL)
		}
	}
	if lost == nil {
		// baton run may find the exit only after a pause (kill -STOP) in
		// which the lock was lost and the watchdog stopped the command:
		// the command did not end under the lock.
		if err := lock.Err(); err != nil {
			lost = err
			r.errorf("%v; the command was stopped", err)
		}
	}
	code := ch.ExitCode()
	switch {
	case lost != nil:
	case code != 0:
		// Said even though the command has said its own: baton run's
		// codes (75-78) and the command's are told apart here.
		r.errorf("%s exited with status %d", o.Command[0], code)
	default:
		r.logf("%s exited with status %d", o.Command[0], code)
	}

	// What the command left in its group must not outlive the lock.
	if ch.GroupAlive() {
		if lost == nil {
			r.logf("stopping what the command left running in its process group")
		}
		deadline := time.Now().Add(o.KillGrace)
		if !termAt.IsZero() {
			deadline = termAt.Add(o.KillGrace)
		}
		terminate()
		if !ch.AwaitGroup(deadline) {
			r.errorf("processes of the command's group still run %v after SIGTERM; sending SIGKILL", o.KillGrace)
			ch.Signal(syscall.SIGKILL)
			if !ch.AwaitGroup(time.Now().Add(groupKillWait)) {
				r.errorf("processes of the command's group (pgid %d) survived SIGKILL", ch.Pid())
			}
		}
	}

	err = lock.Release()
	switch {
	case lost != nil:
		return ExitLockLost
	case err != nil:
		// Lost after the command had exited: its work was done under the lock.
		r.logf("%v (after the command exited)", err)
	default:
		r.logf("released %s", o.Name)
	}
	return code
}

// logMove tells -v that the claim moved to a new connection: the lock,
// or the place in the queue, goes on there.
func (r *runner) logMove(m baton.Moved) {
	what := "the place in the queue of " + m.Name
	if m.Held {
		what = fmt.Sprintf("lock %s (token %d)", m.Name, m.Token)
	}
	attempts := "1 attempt"
	if m.Attempts != 1 {
		attempts = fmt.Sprintf("%d attempts", m.Attempts)
	}
	reason := "no reason given"
	if m.Reason != nil {
		reason = strings.TrimPrefix(human.OneLine(m.Reason.Error()), "baton: ")
	}
	r.logf("%s moved from %s to %s in %v (%s; %s)", what, m.From, m.To, roundWait(m.Took), reason, attempts)
}

// deadlineTellShare sets how often baton run looks whether the lock's
// deadline moved, to tell the watchdog: every lease/20. The deadline is
// 0.8 × lease after a confirmed send, and heartbeats go every lease/4, so
// the watchdog's copy is never within 0.5 × lease of running out while
// baton run runs.
const deadlineTellShare = 20

// groupKillWait bounds the wait for a process group to vanish after
// SIGKILL, which only a process stuck in the kernel survives.
const groupKillWait = 2 * time.Second

// hold keeps the lock, with no command, until a signal asks for its
// release (exit 0) or it is lost (exit 77).
func (r *runner) hold(lock *baton.Lock, stops <-chan os.Signal) int {
	fmt.Fprintln(r.cfg.Stdout, lock.Token())
	what := "holding " + r.cfg.Name
	if r.cfg.Prog == "baton elect" {
		what = fmt.Sprintf("leading %s as %s", r.cfg.Name, r.cfg.Owner)
	}
	r.logf("%s (token %d) until Ctrl-C or SIGTERM", what, lock.Token())
	for {
		select {
		case m := <-r.moves:
			r.logMove(m)
		case <-lock.Done():
			err := lock.Err()
			lock.Release()
			r.errorf("%v", err)
			return ExitLockLost
		case sig := <-stops:
			if r.refused(sig) {
				continue
			}
			if err := lock.Release(); err != nil {
				r.errorf("%v (before %s)", err, supervise.SignalName(sig))
				return ExitLockLost
			}
			r.logf("%s: released %s", supervise.SignalName(sig), r.cfg.Name)
			return ExitOK
		}
	}
}
