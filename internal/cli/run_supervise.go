package cli

// The life of one baton run: wait for the lock, run the command, stop it
// when ownership ends, release.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/supervise"
)

func runRun(ctx context.Context, s *sys, c *command, args []string) int {
	o, code, ok := parseRun(s, c, args)
	if !ok {
		return code
	}
	r := &runner{s: s, o: &o, owner: o.owner.get(), prog: "baton " + c.name}
	return r.run(ctx)
}

// runner is one baton run.
type runner struct {
	prog   string // "baton run", "baton lock", "baton elect": its lines' prefix
	s      *sys
	o      *runOptions
	owner  string
	status *statusLine
	// lastRetry is why the wait's last attempt failed (WithRetryFunc),
	// for the line of a -connect-timeout.
	lastRetry error
	// moves are the claim's moves to a new connection (WithMovedFunc),
	// told by -v.
	moves chan baton.Moved
}

// logf prints one line of -v output (and makes room for it on a terminal).
func (r *runner) logf(format string, args ...any) {
	if r.o.verbose {
		r.status.printf(r.prog+": "+format, args...)
	}
}

// errorf prints one line that a person must see (an error, a warning, why
// baton run exits non-zero) unless -q asked for silence.
func (r *runner) errorf(format string, args ...any) {
	if !r.o.quiet {
		r.status.printf(r.prog+": "+format, args...)
	}
}

func (r *runner) run(ctx context.Context) int {
	o := r.o
	r.status = newStatusLine(r.s.stderr, o.verbose, o.quiet)
	r.status.prog = r.prog
	var path string
	if len(o.command) > 0 {
		if !supervise.Supported {
			r.errorf("not supported on %s: it needs process groups", runtime.GOOS)
			return exitFailure
		}
		// The command is looked up before waiting: a typo should not cost
		// a place in the queue, or take the lock from others.
		var err error
		path, err = exec.LookPath(o.command[0])
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
				r.errorf("%s: command not found", o.command[0])
				return exitCmdNotFound
			}
			r.errorf("%s: cannot run it: %v", o.command[0], unwrapExecError(err))
			return exitCannotExec
		}
	}

	// Signals are ours from here on: each is passed to the command once it
	// runs. Registering also keeps a second signal from killing baton run
	// (main gives them back to their default action after the first).
	var wg sync.WaitGroup
	defer wg.Wait()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, append(supervise.ForwardedSignals, supervise.RefusedSignals...)...)
	defer signal.Stop(sigs)
	stops := make(chan os.Signal, 8)
	quit := make(chan struct{})
	defer close(quit)
	wg.Go(func() { relayStops(ctx, sigs, stops, quit) })

	tlsCfg, err := o.tls.config()
	if err != nil {
		r.errorf("%v", err)
		return exitFailure
	}
	r.moves = make(chan baton.Moved, 8)
	client, err := baton.New(o.addrs.addrs, baton.WithLease(o.lease), baton.WithOwner(r.owner), baton.WithTLSConfig(tlsCfg),
		baton.WithResume(o.resume), baton.WithMovedFunc(func(m baton.Moved) {
			select {
			case r.moves <- m:
			default: // a backlog of moves: the next one is told
			}
		}))
	if err != nil {
		return usageError(r.s, strings.TrimPrefix(r.prog, "baton "), err.Error())
	}
	// The ops API only feeds the status: a problem with it is told, never
	// fatal to the job.
	var ops *opsclient.Client
	if o.opsAddrNote != "" {
		r.logf("no holder or grace information: %s", o.opsAddrNote)
	}
	if o.opsAddr != "" && r.status.active() {
		if token, err := adminToken(r.s, o.adminTokenFile); err != nil {
			r.errorf("no holder information: %v", err)
		} else {
			ops = opsclient.New(o.opsAddr, token, tlsCfg)
		}
	}
	if margin := o.lease / 5; o.killGrace > margin && len(o.command) > 0 {
		// Said before the wait, when a person can still change it.
		r.errorf("warning: -kill-grace %v is longer than the 0.2 × lease margin (%v): if the server stops confirming the lock, a command that ignores SIGTERM may run on beside the next holder for up to %v",
			o.killGrace, margin, o.killGrace-margin)
	}
	lock, code := r.acquire(client, ops, stops)
	if lock == nil {
		return code
	}
	if len(o.command) == 0 {
		return r.hold(lock, stops)
	}
	return r.supervise(path, lock, stops)
}

// relayStops passes on every signal of sigs to stops, and turns the end of
// ctx into a SIGTERM unless a signal ended it: main's signal context, whose
// signal also arrives on sigs. It returns when quit is closed.
func relayStops(ctx context.Context, sigs <-chan os.Signal, stops chan<- os.Signal, quit <-chan struct{}) {
	done := ctx.Done()
	for {
		select {
		case sig := <-sigs:
			select {
			case stops <- sig:
			default: // the command has a backlog of these already
			}
		case <-done:
			done = nil
			if !causedBySignal(ctx) {
				select {
				case stops <- syscall.SIGTERM:
				default:
				}
			}
		case <-quit:
			return
		}
	}
}

// causedBySignal reports whether ctx was ended by signal.NotifyContext
// receiving a signal. Its cause is documented only as "an error describing
// the signal", of an unexported type, so the text is what there is.
func causedBySignal(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != nil && strings.HasSuffix(cause.Error(), " signal received")
}

// acquire waits for the lock, showing the status, until it is granted or
// the wait ends. On failure it returns nil and the exit code, with the
// reason printed.
func (r *runner) acquire(client *baton.Client, ops *opsclient.Client, stops <-chan os.Signal) (*baton.Lock, int) {
	o := r.o
	waitCtx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if o.wait > 0 {
		var cancelTimeout context.CancelFunc
		waitCtx, cancelTimeout = context.WithTimeoutCause(waitCtx, o.wait, errWaitTimedOut)
		defer cancelTimeout()
	}

	type result struct {
		lock *baton.Lock
		err  error
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan result, 1)
	start := time.Now()
	positions := make(chan int, 1)
	retries := make(chan retry, 16)
	opts := []baton.Option{baton.WithNoWait(o.noWait), baton.WithWaitingFunc(func(position int) {
		// The newest position replaces one not yet shown. Only this
		// callback sends, so the send after the drain cannot block.
		select {
		case <-positions:
		default:
		}
		positions <- position
	}), baton.WithRetryFunc(func(err error, wait time.Duration) {
		select {
		case retries <- retry{err, wait}:
		default: // at most one every backoff: never this many unread
		}
	}), claimKind(o)}
	// -connect-timeout runs while no server answers: from the start until
	// the first answer, and again from each retry after a server had
	// answered.
	connect := time.NewTimer(time.Hour)
	connect.Stop()
	defer connect.Stop()
	var connectC <-chan time.Time
	armConnect := func() {
		if o.connectTimeout > 0 && connectC == nil {
			connect.Reset(o.connectTimeout)
			connectC = connect.C
		}
	}
	answered := func() {
		connect.Stop()
		connectC = nil
	}
	armConnect()
	wg.Go(func() {
		l, err := client.Acquire(waitCtx, o.name, opts...)
		done <- result{l, err}
	})

	w := waitState{name: o.name, start: start}
	// The status appears after a moment, so that a lock granted at once
	// shows nothing; ticks then refresh the time waited.
	tick := time.NewTimer(statusDelay)
	defer tick.Stop()
	var infos <-chan lockInfo
	pollCtx, stopPoll := context.WithCancel(context.Background())
	defer stopPoll()
	if ops != nil {
		ch := make(chan lockInfo, 1)
		infos = ch
		wg.Go(func() { pollLock(pollCtx, ops, o.name, ch) })
	}
	var sig os.Signal
	for {
		select {
		case res := <-done:
			r.status.clear()
			stopPoll()
			if res.err == nil && sig != nil {
				// Granted as the signal came: the command must not start.
				res.lock.Release()
				res.err = context.Canceled
			}
			if res.err == nil {
				r.logf("acquired %s after %v (token %d)", o.name, roundWait(time.Since(start)), res.lock.Token())
				return res.lock, exitOK
			}
			return nil, r.acquireFailed(res.err, sig, time.Since(start))
		case m := <-r.moves:
			r.logMove(m)
		case p := <-positions:
			answered()
			w.position, w.waiting = p, true
			r.status.show(w, time.Now())
		case rt := <-retries:
			r.lastRetry = rt.err
			if errors.Is(rt.err, baton.ErrNoAnswer) {
				// Said whatever -v says: nothing may come of the wait.
				r.errorf("%v; retrying in %v", rt.err, roundWait(rt.wait))
			} else {
				r.logf("%v; retrying in %v", rt.err, roundWait(rt.wait))
			}
			armConnect()
		case <-connectC:
			connectC = nil
			cancel(errConnectTimedOut)
		case info := <-infos:
			if info.err != "" && info.err != w.info.err {
				r.logf("no holder information: %s", info.err)
			}
			w.info = info
			r.status.show(w, time.Now())
		case <-tick.C:
			w.waiting = true
			r.status.show(w, time.Now())
			tick.Reset(statusTick)
		case s := <-stops:
			if r.refused(s) {
				continue
			}
			if sig == nil {
				sig = s
				cancel(fmt.Errorf("%s received", supervise.SignalName(s)))
			}
		}
	}
}

// acquireFailed prints why the wait ended and returns the exit code.
func (r *runner) acquireFailed(err error, sig os.Signal, waited time.Duration) int {
	o := r.o
	var opErr *net.OpError
	switch {
	case sig != nil:
		r.errorf("%s while waiting for %s; not running the command", supervise.SignalName(sig), o.name)
		return signalExit(sig)
	case errors.Is(err, baton.ErrBusy):
		r.errorf("lock %s is busy; not waiting (-nowait)", o.name)
		return exitBusy
	case errors.Is(err, errConnectTimedOut):
		last := ""
		if r.lastRetry != nil {
			last = "; last: " + r.lastRetry.Error()
		}
		r.errorf("no server at %s answered within %v (-connect-timeout)%s", strings.Join(o.addrs.addrs, ", "), o.connectTimeout, last)
		return exitUnreachable
	case errors.Is(err, baton.ErrWrongPort):
		r.errorf("%v", acquireReason(err))
		return exitUnreachable
	case errors.Is(err, errWaitTimedOut):
		r.errorf("gave up waiting for lock %s after %v (-wait)", o.name, o.wait)
		return exitWaitTimeout
	case errors.Is(err, baton.ErrKicked):
		r.errorf("an operator removed this waiter from the queue of %s (kicked) after %v", o.name, roundWait(waited))
		return exitFailure
	case errors.Is(err, baton.ErrBadRequest):
		return usageError(r.s, strings.TrimPrefix(r.prog, "baton "), err.Error())
	case isLimitMismatch(err):
		// Printed whatever -q says, as a usage error is: retrying cannot
		// help, the command line disagrees with the name's other users.
		fmt.Fprintf(r.s.stderr, "%s: %s\n", r.prog, human.OneLine(limitMismatchLine(o, err)))
		return exitUsage
	case errors.As(err, &opErr) && opErr.Op == "dial":
		r.errorf("cannot reach a server at %s: %s", strings.Join(o.addrs.addrs, ", "), dialReason(err))
		return exitUnreachable
	}
	r.errorf("%v", err)
	return exitFailure
}

// retry is an attempt that Acquire gave up, to try again after wait.
type retry struct {
	err  error
	wait time.Duration
}

// acquireReason is a failed Acquire's reason without its "acquire NAME: "
// prefix, which baton run's own line says otherwise.
func acquireReason(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// dialReason is the short reason of a failed dial: "connection refused"
// rather than the whole chain of addresses.
func dialReason(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Error()
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	return err.Error()
}

// signalExit is the shell's status for signal sig: 128+N.
func signalExit(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitFailure
}

// refused reports whether sig is one that baton run does not act on, and
// says so.
func (r *runner) refused(sig os.Signal) bool {
	if !slices.Contains(supervise.RefusedSignals, sig) {
		return false
	}
	r.errorf("ignoring %s: a suspended baton run could not keep the lock while the command runs", supervise.SignalName(sig))
	return true
}

// unwrapExecError drops the "exec: "name": " prefix of an exec.Error.
func unwrapExecError(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// supervise runs the command while the lock is held, stops it when
// ownership ends, and releases the lock once it has exited. It returns the
// exit code.
func (r *runner) supervise(path string, lock *baton.Lock, stops <-chan os.Signal) int {
	o := r.o
	cmd := exec.Command(path, o.command[1:]...)
	cmd.Args[0] = o.command[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, r.s.stdout, r.s.stderr
	cmd.Env = append(os.Environ(),
		"BATON_LOCK="+o.name,
		"BATON_TOKEN="+strconv.FormatUint(lock.Token(), 10))
	if err := lock.Err(); err != nil {
		// Lost between the grant and now: the command must not start.
		lock.Release()
		r.errorf("%v; not running the command", err)
		return exitLockLost
	}
	ch, err := supervise.Start(cmd, o.killGrace, o.verbose)
	if err != nil {
		lock.Release()
		r.errorf("%s: %v", o.command[0], unwrapExecError(err))
		if errors.Is(err, fs.ErrNotExist) {
			return exitCmdNotFound
		}
		return exitCannotExec
	}
	r.logf("running %s (pid %d) under %s", o.command[0], ch.Pid(), o.name)
	// The watchdog learns each new deadline of the lock, so that it stops
	// the command itself if baton run cannot (stopped, starved).
	lastDeadline := lock.ValidUntil()
	ch.SetDeadline(lastDeadline)
	deadlines := time.NewTicker(max(o.lease/deadlineTellShare, 5*time.Millisecond))
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
		grace = time.NewTimer(o.killGrace)
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
			r.errorf("%v; stopping the command (SIGTERM to its process group, SIGKILL after %v)", lost, o.killGrace)
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
			r.errorf("the command still runs %v after SIGTERM (-kill-grace); sending SIGKILL", o.killGrace)
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
		r.errorf("%s exited with status %d", o.command[0], code)
	default:
		r.logf("%s exited with status %d", o.command[0], code)
	}

	// What the command left in its group must not outlive the lock.
	if ch.GroupAlive() {
		if lost == nil {
			r.logf("stopping what the command left running in its process group")
		}
		deadline := time.Now().Add(o.killGrace)
		if !termAt.IsZero() {
			deadline = termAt.Add(o.killGrace)
		}
		terminate()
		if !ch.AwaitGroup(deadline) {
			r.errorf("processes of the command's group still run %v after SIGTERM; sending SIGKILL", o.killGrace)
			ch.Signal(syscall.SIGKILL)
			if !ch.AwaitGroup(time.Now().Add(groupKillWait)) {
				r.errorf("processes of the command's group (pgid %d) survived SIGKILL", ch.Pid())
			}
		}
	}

	err = lock.Release()
	switch {
	case lost != nil:
		return exitLockLost
	case err != nil:
		// Lost after the command had exited: its work was done under the lock.
		r.logf("%v (after the command exited)", err)
	default:
		r.logf("released %s", o.name)
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
