// Package runner is the lock side of baton run, baton lock and baton
// elect: it waits in the lock's queue showing the status, keeps the lock,
// runs the command under internal/supervise and stops it when ownership
// ends, and says on stderr why it exits. The command line parses the
// flags into a Config and calls Run.
package runner

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/supervise"
)

// Exit codes of baton run when it does not pass on the command's own. They
// sit in the sysexits range (64-78), above what shells and most commands
// use, and below 126-165 (could not execute, not found, killed by a signal).
const (
	ExitOK          = 0 // the lock was released as asked (baton lock, baton elect)
	exitFailure     = 1
	exitUsage       = 2
	ExitBusy        = 75  // -nowait and the lock is held (sysexits' EX_TEMPFAIL: try again later)
	ExitWaitTimeout = 76  // -wait ran out before the lock was granted
	ExitLockLost    = 77  // ownership ended while the command ran; the command was stopped
	ExitUnreachable = 78  // no server could be reached
	ExitCannotExec  = 126 // the command exists but cannot be executed (as in sh)
	ExitCmdNotFound = 127 // the command was not found (as in sh)
)

// Config is one claim: the lock, how to wait for it, the command to run
// under it (none: hold it until a signal), and where to write.
type Config struct {
	// Prog is the prefix of every line on stderr: "baton run", "baton
	// lock" or "baton elect" (which leads rather than holds).
	Prog    string
	Name    string   // the lock
	Command []string // the command and its arguments; empty: hold the lock
	Addrs   []string // the servers, tried in order
	Owner   string   // the owner text sent
	Lease   time.Duration
	NoWait  bool          // exit ExitBusy at once if the lock is held
	Wait    time.Duration // the longest wait (ExitWaitTimeout after it); 0: for ever
	// ConnectTimeout is the longest time without a server that answers
	// (ExitUnreachable after it); 0: as long as Wait allows.
	ConnectTimeout time.Duration
	Limit          int  // > 0: a slot of a semaphore of this many
	Shared         bool // a reader of a read/write lock
	// KillGrace is the time between SIGTERM and SIGKILL when the command
	// must stop.
	KillGrace time.Duration
	Resume    bool // carry the claim to the next server (protocol version 3)
	Verbose   bool // log each step on stderr
	Quiet     bool // none of its own lines but usage errors and LIMIT_MISMATCH
	// OpsAddr is the ops API asked while waiting for who holds the lock
	// ("" for none); OpsAddrNote says why none is asked, when that is
	// worth a -v line.
	OpsAddr, OpsAddrNote string
	// TLS loads the client's TLS configuration (nil: plain TCP); its
	// error ends the run. AdminToken reads the ops API's bearer token,
	// only when the status asks the ops API; its error is told, never
	// fatal. Both are called after the command has been looked up, so
	// that their lines come in the order they always have.
	TLS        func() (*tls.Config, error)
	AdminToken func() (string, error)
	// Stdout gets the token of baton lock and baton elect, and is the
	// command's stdout; Stderr gets every line of the run's own and is
	// the command's stderr. Stdin is always os.Stdin.
	Stdout, Stderr io.Writer
	// UsageError prints msg as a usage error of the command and returns
	// its exit code: for what the server refuses as a bad request.
	UsageError func(msg string) int
}

// Run waits for the lock, runs the command under it (or holds it), and
// returns the exit code. Cancelling ctx stops the run as SIGTERM would,
// unless a signal cancelled it: that signal is passed on itself.
func Run(ctx context.Context, cfg Config) int {
	r := &runner{cfg: &cfg}
	return r.run(ctx)
}

// runner is one baton run.
type runner struct {
	cfg    *Config
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
	if r.cfg.Verbose {
		r.status.printf(r.cfg.Prog+": "+format, args...)
	}
}

// errorf prints one line that a person must see (an error, a warning, why
// baton run exits non-zero) unless -q asked for silence.
func (r *runner) errorf(format string, args ...any) {
	if !r.cfg.Quiet {
		r.status.printf(r.cfg.Prog+": "+format, args...)
	}
}

func (r *runner) run(ctx context.Context) int {
	o := r.cfg
	r.status = newStatusLine(r.cfg.Stderr, o.Verbose, o.Quiet)
	r.status.prog = r.cfg.Prog
	var path string
	if len(o.Command) > 0 {
		if !supervise.Supported {
			r.errorf("not supported on %s: it needs process groups", runtime.GOOS)
			return exitFailure
		}
		// The command is looked up before waiting: a typo should not cost
		// a place in the queue, or take the lock from others.
		var err error
		path, err = exec.LookPath(o.Command[0])
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
				r.errorf("%s: command not found", o.Command[0])
				return ExitCmdNotFound
			}
			r.errorf("%s: cannot run it: %v", o.Command[0], unwrapExecError(err))
			return ExitCannotExec
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

	tlsCfg, err := o.loadTLS()
	if err != nil {
		r.errorf("%v", err)
		return exitFailure
	}
	r.moves = make(chan baton.Moved, 8)
	client, err := baton.New(o.Addrs, baton.WithLease(o.Lease), baton.WithOwner(r.cfg.Owner), baton.WithTLSConfig(tlsCfg),
		baton.WithResume(o.Resume), baton.WithMovedFunc(func(m baton.Moved) {
			select {
			case r.moves <- m:
			default: // a backlog of moves: the next one is told
			}
		}))
	if err != nil {
		return r.cfg.UsageError(err.Error())
	}
	// The ops API only feeds the status: a problem with it is told, never
	// fatal to the job.
	var ops *opsclient.Client
	if o.OpsAddrNote != "" {
		r.logf("no holder or grace information: %s", o.OpsAddrNote)
	}
	if o.OpsAddr != "" && r.status.active() {
		if token, err := o.adminToken(); err != nil {
			r.errorf("no holder information: %v", err)
		} else {
			ops = opsclient.New(o.OpsAddr, token, tlsCfg)
		}
	}
	if margin := o.Lease / 5; o.KillGrace > margin && len(o.Command) > 0 {
		// Said before the wait, when a person can still change it.
		r.errorf("warning: -kill-grace %v is longer than the 0.2 × lease margin (%v): if the server stops confirming the lock, a command that ignores SIGTERM may run on beside the next holder for up to %v",
			o.KillGrace, margin, o.KillGrace-margin)
	}
	lock, code := r.acquire(client, ops, stops)
	if lock == nil {
		return code
	}
	if len(o.Command) == 0 {
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

// loadTLS is TLS's configuration, nil without TLS.
func (c *Config) loadTLS() (*tls.Config, error) {
	if c.TLS == nil {
		return nil, nil
	}
	return c.TLS()
}

// adminToken is AdminToken's token, "" without one.
func (c *Config) adminToken() (string, error) {
	if c.AdminToken == nil {
		return "", nil
	}
	return c.AdminToken()
}
