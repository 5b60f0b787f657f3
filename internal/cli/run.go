package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/netaddr"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/runner"
)

// Defaults of baton run.
const (
	defaultRunAddr = "127.0.0.1:7070"
	// killGraceShare is the default -kill-grace as a share of the lease:
	// 1/10. A holder that stops hearing from the server gives up at
	// 0.8 × lease, and the server cannot move the lock before 1 × lease, so
	// SIGKILL at 0.9 × lease leaves the command dead with 0.1 × lease to
	// spare before anyone else can hold the lock.
	killGraceShare = 10
	// minRunLease is the shortest lease baton run takes. The client must
	// hear from the server within 0.8 × lease, and baton run lives beside
	// a command it starts (a fork and exec, then whatever the command does
	// to the machine): on a busy host a process can wait tens of
	// milliseconds for a CPU, and every such wait longer than 0.8 × lease
	// stops the command. Measured on a 2-core host under a load of 8 to
	// 15 (baton run -lease L x -- sleep 1, ten runs each): 1ms to 50ms
	// lost the lock in nearly every run, 100ms in more than half, 250ms
	// and 1s in none. The Go client, which has no command to start, takes
	// leases from 1ms.
	minRunLease = 250 * time.Millisecond
)

// defaultConnectTimeout is -connect-timeout's default: long enough for a
// server's restart or a cluster's election, short enough that a job whose
// servers are all stuck (accepting, never answering) is not left waiting
// in silence, or piling up under cron.
const defaultConnectTimeout = 30 * time.Second

// runOptions are the flags and arguments of baton run.
type runOptions struct {
	addrs          addrList
	lease          time.Duration
	noWait         bool
	wait           time.Duration
	connectTimeout time.Duration
	owner          ownerValue
	limit          limitValue    // -limit: a slot of a semaphore of this many
	shared         bool          // -shared: a reader of a read/write lock
	killGrace      time.Duration // set from killGraceFlag once the lease is known
	killGraceFlag  optionalDuration
	verbose        bool
	quiet          bool
	observe        bool // baton elect -observe
	opsAddr        string
	// opsAddrNote says why no ops API is asked when -ops-addr was left
	// at its default beside an -addr that is not on this machine.
	opsAddrNote    string
	adminTokenFile string
	tls            clientTLSOptions
	resume         bool // -resume: carry the claim to the next server (protocol version 3)

	name    string   // the lock
	command []string // the command and its arguments
}

func runCommand() *command {
	return &command{
		name:    "run",
		summary: "run a command while holding a lock",
		usage:   "baton run [flags] NAME -- COMMAND [ARGS...]",
		flags:   func() *flag.FlagSet { return newRunFlags(new(runOptions)) },
		help: `baton run waits in the queue of the lock NAME, runs COMMAND once it holds the
lock, and releases the lock when COMMAND exits. Flags may come before or
after NAME; everything after "--" is the command, run directly (use
sh -c '...' for pipes and shell syntax).

The command gets the environment of baton run plus:
  BATON_LOCK   the lock's name
  BATON_TOKEN  the fencing token of this grant: larger than the token of
               every earlier grant of the lock. Pass it to the resource the
               lock guards and have it refuse tokens lower than the highest
               it has seen.
Its stdin, stdout and stderr are those of baton run. It runs in a process
group of its own.

Without -limit or -shared the claim is exclusive: the command runs alone.
-limit N takes a slot of a semaphore of N: at most N shared claims of the
name hold it at once. -shared is a reader of a read/write lock: readers
hold together (with the readers' limit, 65535, the same in every Baton
client), and a writer, a claim without either flag, holds alone. Every
claim waits in the one FIFO queue of the name and nobody overtakes, so a
writer is never starved by readers. While a name has shared sessions,
holding or waiting, the first of them has set its limit: a shared claim
that gives another is refused at once (LIMIT_MISMATCH, exit 2, with the
limit in force). Each holder has its own BATON_TOKEN.

Any -tls-* flag makes baton run speak TLS: -tls-ca is the CA of the
server's certificate (else the system's roots), -tls-cert and -tls-key the
client certificate of a server with -tls-client-ca, -tls-server-name the
name to verify when it is not the host of -addr. A host:port -ops-addr is
then reached over HTTPS with the same files (give http:// to keep it plain).

A command never runs on without the lock. If ownership ends while it runs
(the server stops confirming the lease, an operator force-releases the lock,
the server shuts down), everything the command started gets SIGTERM at once
and SIGKILL after -kill-grace, and baton run exits 77. The default grace is
lease/10: the client gives up at 0.8 × lease without confirmation and the
server cannot move the lock before 1 × lease of silence, so the command is
gone by 0.9 × lease, before anyone else can hold the lock. A longer grace
is warned about. A force-release or an expired lease moves the lock at
once: then only the fencing token protects the resource for the grace.
When the command exits, whatever it left running is stopped the same way
before the lock is released.

On Linux "everything the command started" is the whole process tree: baton
run starts the command under a small watchdog (baton itself) that is a
child subreaper, so processes that leave the process group (setsid) or
double-fork stay in reach, and if baton run itself is killed, even with
SIGKILL, the watchdog kills the whole tree at once. Elsewhere it is the
command's process group, and a baton run killed with SIGKILL leaves the
command running without the lock.

SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to baton run are passed on to the
command's tree; the lock is released once the command has exited.
SIGTSTP (Ctrl-Z) is refused: a suspended baton run could not keep the lock
while the command runs on.
The command is not in the terminal's foreground process group, so one that
reads from the terminal is stopped (SIGTTIN): give it its input another way.

A server that accepts the connection but does not answer (a hung or
stopped process: the kernel still completes the handshake) is given up
after 0.8 × lease, at most 5s, with a line on stderr ("no answer from
127.0.0.1:7070 in 5s; retrying in 50ms"); baton run tries again with a
growing backoff, the next address first, and exits 78 once no server has
answered for -connect-timeout (30s by default), at the start or after
losing its server while it waited. A server that refuses the connection at
the start is exit 78 at once (a wrong address). -addr given Baton's ops
port, or any HTTP port, is exit 78 at once, with the lock port when the
server names it.

When its server restarts (SIGTERM and start again) or a cluster's leader
changes (a planned handover, or the leader's crash), baton run carries the
lock to the next server within the lock's deadline, 0.8 × lease after its
last confirmation: the command runs on, with the same BATON_TOKEN, and -v
says that the lock moved, where to and how long it took. A server older
than protocol version 3 cannot do this: there, and with -resume=false, the
lock ends with its connection. baton run exits 77 only when the lock is
really lost.

While it waits, baton run shows one status line on stderr when stderr is a
terminal: the place in the queue, the time waited and, when -ops-addr is
given, who holds the lock. It is silent while all goes well when stderr is
not a terminal (cron, CI) unless -v is given, which logs each change and
each step. Whatever stderr is, every exit other than 0 comes with one
short line on stderr that says why (the lock was busy, the wait ran out,
no server answered, the command exited with status 3, ...), and so does
a server that accepts but does not answer; -q silences all of baton
run's own lines but usage errors and LIMIT_MISMATCH (exit 2 always says
why).

Exit status:
  the command's   when it ran: its exit status, or 128+N if signal N
                  killed it
  1               another failure (kicked from the queue by an operator,
                  a refusal by the server)
  2               usage error; also a shared claim whose limit differs
                  from the one in force for the name (LIMIT_MISMATCH)
  75              lock busy: -nowait and the claim cannot hold at once
  76              -wait ran out before the lock was granted
  77              the lock was lost while the command ran; it was stopped
  78              no server at -addr could be reached, none answered
                  within -connect-timeout, or -addr is not a lock port
  126, 127        the command cannot be executed, or was not found
  128+N           baton run got signal N while it waited
A command that itself exits 75 to 78 cannot be told apart from baton run's
codes by the status alone; the line on stderr says which it was.

Examples:
  baton run jobs/nightly -- ./nightly.sh
  baton run -nowait -addr baton1:7070,baton2:7070 deploy/web -- make deploy
  baton run -wait 5m -lease 30s db/migrate -- ./migrate up
  baton run -limit 4 render/gpus -- ./render.sh     # at most 4 at once
  baton run -shared config/routes -- ./report.sh    # a reader; writers run without -shared

  # crontab: every 5 minutes, skip the run if the last one still holds the lock
  */5 * * * * baton run -nowait -addr baton.internal:7070 jobs/report -- /opt/report/run.sh

  # fencing: the resource refuses writes with a token older than it has seen
  baton run jobs/sync -- sh -c 'curl -fsS -H "Fencing-Token: $BATON_TOKEN" -X PUT --data-binary @out.json https://store.internal/sync'

  # mutual TLS: the server's CA, and this client's certificate
  baton run -addr baton.internal:7070 -tls-ca ca.crt -tls-cert worker.crt -tls-key worker.key jobs/x -- ./x.sh

  # scripts: tell "busy" from a failure of the job, without baton run's line
  baton run -q -nowait jobs/nightly -- ./nightly.sh; code=$?
  [ "$code" -eq 75 ] && echo "another run holds the lock; skipped"
`,
		run: runRun,
	}
}

func runRun(ctx context.Context, s *sys, c *command, args []string) int {
	o, code, ok := parseRun(s, c, args)
	if !ok {
		return code
	}
	return runner.Run(ctx, claimConfig(s, c, &o))
}

// claimConfig is the runner's configuration of baton run, lock or elect
// (c) from its parsed flags.
func claimConfig(s *sys, c *command, o *runOptions) runner.Config {
	return runner.Config{
		Prog:           "baton " + c.name,
		Name:           o.name,
		Command:        o.command,
		Addrs:          o.addrs.addrs,
		Owner:          o.owner.get(),
		Lease:          o.lease,
		NoWait:         o.noWait,
		Wait:           o.wait,
		ConnectTimeout: o.connectTimeout,
		Limit:          o.limit.n,
		Shared:         o.shared,
		KillGrace:      o.killGrace,
		Resume:         o.resume,
		Verbose:        o.verbose,
		Quiet:          o.quiet,
		OpsAddr:        o.opsAddr,
		OpsAddrNote:    o.opsAddrNote,
		TLS:            o.tls.config,
		AdminToken:     func() (string, error) { return adminToken(s, o.adminTokenFile) },
		Stdout:         s.stdout,
		Stderr:         s.stderr,
		UsageError:     func(msg string) int { return usageError(s, c.name, msg) },
	}
}

func newRunFlags(o *runOptions) *flag.FlagSet {
	fs := newFlagSet("run")
	o.addrs = addrList{addrs: []string{defaultRunAddr}}
	fs.Var(&o.addrs, "addr", "`host:port` of a server; repeat it or separate with commas for more, tried in order")
	fs.DurationVar(&o.lease, "lease", baton.DefaultLease, "the lease: a holder silent this long loses the lock (a failure detector, not a time limit); at least "+minRunLease.String())
	fs.BoolVar(&o.noWait, "nowait", false, "exit 75 at once if the lock is held instead of waiting")
	fs.DurationVar(&o.wait, "wait", 0, "the longest wait for the lock (exit 76 after it); 0 waits for ever")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", defaultConnectTimeout, "the longest time without a server that answers, at the start or after losing one while waiting (exit 78 after it); 0: as long as -wait allows")
	fs.Var(&o.owner, "owner", "owner `text` that tells operators who holds or waits")
	fs.Var(&o.limit, "limit", "take a slot of a semaphore of `N` slots (1 to 65535): a shared claim, held with the name's other shared claims, at most N at once; all must give the same N")
	fs.BoolVar(&o.shared, "shared", false, "be a reader of a read/write lock: a shared claim with the readers' limit, 65535; a writer is a claim without it")
	o.killGraceFlag.unset = "lease/10"
	fs.Var(&o.killGraceFlag, "kill-grace", "time between SIGTERM and SIGKILL when the command must stop; the default fits in the 0.2 × lease margin")
	fs.BoolVar(&o.verbose, "v", false, "log each step on stderr, also when it is not a terminal")
	fs.BoolVar(&o.quiet, "q", false, "print nothing of baton run's own on stderr (no status, no line when it exits non-zero) except usage errors and LIMIT_MISMATCH; the exit status still tells")
	fs.StringVar(&o.opsAddr, "ops-addr", defaultOpsAddr, "`host:port` of the ops API (a comma-separated list for a cluster), asked while waiting for who holds the lock and the server's grace; the default is asked only when every -addr is on this machine")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "`file` with the ops API's bearer token (else $BATON_ADMIN_TOKEN)")
	fs.BoolVar(&o.resume, "resume", true, "carry the lock (or the place in the queue) to the next server when the server restarts or a cluster's leader changes, within the lease's deadline (protocol version 3); false behind a TCP proxy that ends connections on both sides")
	o.tls.register(fs, "server")
	return fs
}

// addrList is a list of host:port, from a repeated flag or commas. The
// first Set replaces the default.
type addrList struct {
	addrs []string
	set   bool
}

func (l *addrList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.addrs, ",")
}

func (l *addrList) Set(v string) error {
	if !l.set {
		l.addrs, l.set = nil, true
	}
	for a := range strings.SplitSeq(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%q is not host:port", a)
		}
		l.addrs = append(l.addrs, a)
	}
	if len(l.addrs) == 0 {
		return errors.New("no address given")
	}
	return nil
}

// limitValue is the -limit flag: unset means an exclusive claim.
type limitValue struct {
	n   int
	set bool
}

func (v *limitValue) String() string {
	if v == nil || !v.set {
		return ""
	}
	return strconv.Itoa(v.n)
}

func (v *limitValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < 1 || n > wire.MaxLimit {
		return fmt.Errorf("a limit is a whole number from 1 to %d", wire.MaxLimit)
	}
	v.n, v.set = int(n), true
	return nil
}

// ownerValue is the -owner flag: unset means hostname:pid of baton run.
type ownerValue struct {
	owner string
	set   bool
}

func (v *ownerValue) String() string {
	if v == nil || !v.set {
		return "hostname:pid"
	}
	return v.owner
}

func (v *ownerValue) Set(s string) error {
	if err := wire.CheckOwner(s); err != nil {
		return errors.New(wireMsg(err))
	}
	v.owner, v.set = s, true
	return nil
}

// get is the owner text to send.
func (v *ownerValue) get() string {
	if v.set {
		return v.owner
	}
	pid := strconv.Itoa(os.Getpid())
	if host, err := os.Hostname(); err == nil && wire.CheckOwner(host+":"+pid) == nil {
		return host + ":" + pid
	}
	return "pid:" + pid
}

// wireMsg is a wire check's complaint without the "baton: BAD_REQUEST"
// prefix.
func wireMsg(err error) string {
	var we *wire.Error
	if errors.As(err, &we) && we.Msg != "" {
		return we.Msg
	}
	return err.Error()
}

// parseRun reads and checks the flags and arguments of baton run. When ok
// is false the command must return code.
func parseRun(s *sys, c *command, args []string) (o runOptions, code int, ok bool) {
	return parseClaim(s, c, args, commandRequired)
}

// commandRule says whether a command follows the lock name: always
// (baton run), never (baton lock), or when given (baton elect).
type commandRule int

const (
	commandRequired commandRule = iota
	commandNone
	commandOptional
)

// parseClaim reads and checks the flags and arguments of baton run, lock
// or elect (rule). When ok is false the command must return code.
func parseClaim(s *sys, c *command, args []string, rule commandRule) (o runOptions, code int, ok bool) {
	fs := newRunFlags(&o)
	if c.name == "elect" {
		fs = newElectFlags(&o)
	}
	pre, cmd, hasSep := args, []string(nil), false
	if i := slices.Index(args, "--"); i >= 0 {
		pre, cmd, hasSep = args[:i], args[i+1:], true
	}
	pos, code, ok := parseInterspersed(s, c, fs, pre)
	if !ok {
		return o, code, false
	}
	fail := func(msg string) (runOptions, int, bool) {
		return o, usageError(s, c.name, msg), false
	}
	switch {
	case len(pos) == 0:
		return fail(fmt.Sprintf("no lock name given (%s)", c.usage))
	case rule == commandNone && (hasSep || len(pos) > 1):
		return fail(fmt.Sprintf("baton %s takes no command: it holds the lock until Ctrl-C or SIGTERM (baton run NAME -- COMMAND runs one)", c.name))
	case !hasSep && len(pos) > 1:
		return fail(fmt.Sprintf(`missing "--" between the lock name and the command (baton %s [flags] %s -- %s)`,
			c.name, pos[0], strings.Join(pos[1:], " ")))
	case len(pos) > 1:
		return fail(fmt.Sprintf(`unexpected argument %q before "--": give one lock name`, pos[1]))
	case rule == commandRequired && (!hasSep || len(cmd) == 0), rule == commandOptional && hasSep && len(cmd) == 0:
		return fail(`no command given after "--"`)
	}
	o.name, o.command = pos[0], cmd
	if err := wire.CheckName(o.name); err != nil {
		return fail(wireMsg(err))
	}
	switch {
	case o.lease < minRunLease:
		return fail(fmt.Sprintf("lease %v is below baton run's minimum of %v: the server must confirm the lock every 0.8 × lease, "+
			"and a busy machine can keep a process from running for longer than that, which would stop the command at once; use -lease %v or more",
			o.lease, minRunLease, minRunLease))
	case o.lease > time.Duration(^uint32(0))*time.Millisecond:
		return fail(fmt.Sprintf("lease (%v) exceeds the protocol's maximum of %v", o.lease, time.Duration(^uint32(0))*time.Millisecond))
	case o.wait < 0:
		return fail(fmt.Sprintf("wait (%v) must not be negative", o.wait))
	case o.connectTimeout < 0:
		return fail(fmt.Sprintf("connect-timeout (%v) must not be negative", o.connectTimeout))
	case o.noWait && o.wait > 0:
		return fail("-nowait and -wait exclude each other")
	case o.quiet && o.verbose:
		return fail("-q and -v exclude each other")
	case o.limit.set && o.shared:
		return fail(fmt.Sprintf("-limit and -shared exclude each other: -limit %d takes a slot of a semaphore of %d, -shared is a reader (of the readers' limit, %d)",
			o.limit.n, o.limit.n, wire.MaxLimit))
	case o.killGraceFlag.d < 0:
		return fail(fmt.Sprintf("kill-grace (%v) must not be negative", o.killGraceFlag.d))
	}
	o.killGrace = o.lease / killGraceShare
	if o.killGraceFlag.set {
		o.killGrace = o.killGraceFlag.d
	}
	opsSet := false
	fs.Visit(func(f *flag.Flag) { opsSet = opsSet || f.Name == "ops-addr" })
	if !opsSet && !allLoopback(o.addrs.addrs) {
		// The default ops API is this machine's: it would describe
		// another server than the one at -addr.
		o.opsAddr = ""
		o.opsAddrNote = fmt.Sprintf("give -ops-addr (its default, %s, is asked only when every -addr is on this machine)", defaultOpsAddr)
	}
	if o.opsAddr != "" {
		if err := opsclient.CheckAddrs(o.opsAddr); err != nil {
			return fail(err.Error())
		}
	}
	if err := o.tls.check(); err != nil {
		return fail(err.Error())
	}
	return o, exitOK, true
}

// allLoopback reports whether every address names this machine: a
// loopback IP or localhost.
func allLoopback(addrs []string) bool {
	for _, a := range addrs {
		if !netaddr.IsLoopback(a) {
			return false
		}
	}
	return true
}

// parseInterspersed parses args into fs allowing flags between the
// positional arguments, which it returns, and then applies the
// environment. Arguments after a "--" are all positional. When ok is false
// the command must return code.
func parseInterspersed(s *sys, c *command, fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	explainDurations(fs)
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printCommandHelp(s.stdout, c)
				return nil, exitOK, false
			}
			return nil, usageError(s, c.name, err.Error()), false
		}
		if fs.NArg() == 0 {
			break
		}
		if consumed := len(rest) - fs.NArg(); consumed > 0 && rest[consumed-1] == "--" {
			pos = append(pos, fs.Args()...)
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if err := applyEnv(fs, s.lookupEnv); err != nil {
		return nil, usageError(s, c.name, err.Error()), false
	}
	return pos, exitOK, true
}

// optionalDuration is a duration flag whose default depends on other flags:
// set tells whether it was given, and unset is what the help shows.
type optionalDuration struct {
	d     time.Duration
	set   bool
	unset string
}

func (v *optionalDuration) String() string {
	switch {
	case v == nil: // the flag package's zero value, for its help text
		return ""
	case !v.set:
		return v.unset
	}
	return v.d.String()
}

func (v *optionalDuration) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	v.d, v.set = d, true
	return nil
}
