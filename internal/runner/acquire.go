package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/supervise"
)

// errWaitTimedOut is the cause of the wait's context when -wait runs out,
// errConnectTimedOut when -connect-timeout does.
var (
	errWaitTimedOut    = errors.New("-wait ran out")
	errConnectTimedOut = errors.New("-connect-timeout ran out")
)

// acquire waits for the lock, showing the status, until it is granted or
// the wait ends. On failure it returns nil and the exit code, with the
// reason printed.
func (r *runner) acquire(client *baton.Client, ops *opsclient.Client, stops <-chan os.Signal) (*baton.Lock, int) {
	o := r.cfg
	waitCtx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if o.Wait > 0 {
		var cancelTimeout context.CancelFunc
		waitCtx, cancelTimeout = context.WithTimeoutCause(waitCtx, o.Wait, errWaitTimedOut)
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
	opts := []baton.Option{baton.WithNoWait(o.NoWait), baton.WithWaitingFunc(func(position int) {
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
		if o.ConnectTimeout > 0 && connectC == nil {
			connect.Reset(o.ConnectTimeout)
			connectC = connect.C
		}
	}
	answered := func() {
		connect.Stop()
		connectC = nil
	}
	armConnect()
	wg.Go(func() {
		l, err := client.Acquire(waitCtx, o.Name, opts...)
		done <- result{l, err}
	})

	w := waitState{name: o.Name, start: start}
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
		wg.Go(func() { pollLock(pollCtx, ops, o.Name, ch) })
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
				r.logf("acquired %s after %v (token %d)", o.Name, roundWait(time.Since(start)), res.lock.Token())
				return res.lock, ExitOK
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
	o := r.cfg
	var opErr *net.OpError
	switch {
	case sig != nil:
		r.errorf("%s while waiting for %s; not running the command", supervise.SignalName(sig), o.Name)
		return signalExit(sig)
	case errors.Is(err, baton.ErrBusy):
		r.errorf("lock %s is busy; not waiting (-nowait)", o.Name)
		return ExitBusy
	case errors.Is(err, errConnectTimedOut):
		last := ""
		if r.lastRetry != nil {
			last = "; last: " + r.lastRetry.Error()
		}
		r.errorf("no server at %s answered within %v (-connect-timeout)%s", strings.Join(o.Addrs, ", "), o.ConnectTimeout, last)
		return ExitUnreachable
	case errors.Is(err, baton.ErrWrongPort):
		r.errorf("%v", acquireReason(err))
		return ExitUnreachable
	case errors.Is(err, errWaitTimedOut):
		r.errorf("gave up waiting for lock %s after %v (-wait)", o.Name, o.Wait)
		return ExitWaitTimeout
	case errors.Is(err, baton.ErrKicked):
		r.errorf("an operator removed this waiter from the queue of %s (kicked) after %v", o.Name, roundWait(waited))
		return exitFailure
	case errors.Is(err, baton.ErrBadRequest):
		return r.cfg.UsageError(err.Error())
	case isLimitMismatch(err):
		// Printed whatever -q says, as a usage error is: retrying cannot
		// help, the command line disagrees with the name's other users.
		fmt.Fprintf(r.cfg.Stderr, "%s: %s\n", r.cfg.Prog, human.OneLine(limitMismatchLine(o, err)))
		return exitUsage
	case errors.As(err, &opErr) && opErr.Op == "dial":
		r.errorf("cannot reach a server at %s: %s", strings.Join(o.Addrs, ", "), dialReason(err))
		return ExitUnreachable
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

// claimKind is the client option of the claim that -limit and -shared
// ask for; an exclusive claim without either.
func claimKind(o *Config) baton.Option {
	switch {
	case o.Limit > 0:
		return baton.WithLimit(o.Limit)
	case o.Shared:
		return baton.WithShared(true)
	}
	return nil
}

// isLimitMismatch reports whether err is the server's LIMIT_MISMATCH.
func isLimitMismatch(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeLimitMismatch
}

// limitMismatchLine says why a shared claim was refused: the limit in
// force for the name (the server's message) against the one this run
// gave, in the words of the flags.
func limitMismatchLine(o *Config, err error) string {
	var we *wire.Error
	errors.As(err, &we)
	inForce, perr := strconv.ParseUint(we.Msg, 10, 16)
	switch {
	case perr != nil || inForce == 0:
		return fmt.Sprintf("lock %s refused this run's limit (LIMIT_MISMATCH: the limit in force, set by its shared sessions, differs; the server said %q)", o.Name, we.Msg)
	case o.Shared:
		return fmt.Sprintf("lock %s is a semaphore of %d (the limit its shared sessions set), and -shared claims a reader's limit, %d: use -limit %d for a slot of it",
			o.Name, inForce, baton.ReaderLimit, inForce)
	case inForce == baton.ReaderLimit:
		return fmt.Sprintf("lock %s is a read/write lock: its shared sessions are readers (limit %d, as -shared gives); this run asked for -limit %d",
			o.Name, inForce, o.Limit)
	}
	return fmt.Sprintf("lock %s has the limit %d in force, set by its shared sessions; this run asked for -limit %d: every shared claim of a name must give the same limit",
		o.Name, inForce, o.Limit)
}
