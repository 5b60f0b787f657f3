package cli

// baton lock and baton elect: a lock held by the command line itself, as
// etcdctl lock and consul lock hold one without a command, and an
// election on top of it (etcdctl elect).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/opsclient"
	"github.com/batonlock/baton/internal/runner"
)

func lockCommand() *command {
	return &command{
		name:    "lock",
		summary: "take a lock and hold it until Ctrl-C or SIGTERM",
		usage:   "baton lock [flags] NAME",
		flags:   func() *flag.FlagSet { return newRunFlags(new(runOptions)) },
		help: `baton lock waits in the queue of the lock NAME as baton run does, prints the
fencing token of its grant on stdout, and holds the lock until it gets
SIGINT (Ctrl-C), SIGTERM, SIGHUP or SIGQUIT: then it releases the lock and
exits 0. A shell, or another tool, does the work meanwhile; nothing is
stopped for it if the lock is lost (use baton run for that): baton lock
then says why on stderr and exits 77.

Its flags are baton run's (-kill-grace aside, which has nothing to stop);
so are its exit codes: 75 busy with -nowait, 76 -wait ran out, 77 the lock
was lost while held, 78 no server reachable, 2 a usage error, 128+N a
signal N while it waited.

Examples:
  baton lock jobs/maintenance                  # hold it; Ctrl-C releases it
  baton lock -nowait -q deploy/web > token &   # in a script: the token in a file
  kill %1                                      # release it
`,
		run: runLock,
	}
}

func runLock(ctx context.Context, s *sys, c *command, args []string) int {
	o, code, ok := parseClaim(s, c, args, commandNone)
	if !ok {
		return code
	}
	return runner.Run(ctx, claimConfig(s, c, &o))
}

func electCommand() *command {
	return &command{
		name:    "elect",
		summary: "campaign in an election: lead, run a command as the leader, or observe",
		usage:   "baton elect [flags] NAME [-- COMMAND [ARGS...]] | baton elect -observe [flags] NAME",
		flags:   func() *flag.FlagSet { return newElectFlags(new(runOptions)) },
		help: `An election is a lock: the candidate that holds the name NAME leads, with its
value (-owner, default hostname:pid) as the owner text that baton locks,
the dashboard and observers show; the others wait in the queue in the
order they came, and the next one leads the moment the leader ends.

baton elect NAME campaigns, then prints the fencing token of its term on
stdout and leads until Ctrl-C or SIGTERM, as baton lock holds a lock.
baton elect NAME -- COMMAND campaigns, then runs COMMAND as the leader, as
baton run does (BATON_LOCK, BATON_TOKEN; the command is stopped if the
leadership is lost, exit 77). The exit codes are those of baton run and
baton lock.

baton elect -observe NAME campaigns for nothing: it prints the leader of
NAME when it starts (if one leads), then each new leader as it is
granted the name, one line each, "VALUE token N", until interrupted. It
reads the ops API (-ops-addr, default 127.0.0.1:7071; the admin token as
for baton locks), not the lock port.

Examples:
  baton elect -owner "$(hostname):8080" web/primary -- ./serve-primary.sh
  baton elect -owner node-a web/primary        # lead until Ctrl-C
  baton elect -observe web/primary             # who leads, as it changes
`,
		run: runElect,
	}
}

// newElectFlags is baton run's flags and -observe.
func newElectFlags(o *runOptions) *flag.FlagSet {
	fs := newRunFlags(o)
	fs.BoolVar(&o.observe, "observe", false, "print the leader and each new one as it comes, without campaigning (from the ops API)")
	return fs
}

func runElect(ctx context.Context, s *sys, c *command, args []string) int {
	o, code, ok := parseClaim(s, c, args, commandOptional)
	if !ok {
		return code
	}
	if o.observe {
		if len(o.command) > 0 {
			return usageError(s, c.name, "-observe takes no command: it campaigns for nothing")
		}
		return observeElection(ctx, s, &o)
	}
	return runner.Run(ctx, claimConfig(s, c, &o))
}

// observeElection is baton elect -observe: the election's leaders, as
// they come, from the ops API.
func observeElection(ctx context.Context, s *sys, o *runOptions) int {
	if o.opsAddr == "" {
		return usageError(s, "elect", "-observe reads the ops API: "+o.opsAddrNote)
	}
	token, err := adminToken(s, o.adminTokenFile)
	if err != nil {
		return failure(s, "elect", err.Error())
	}
	tlsCfg, err := o.tls.config()
	if err != nil {
		return failure(s, "elect", err.Error())
	}
	client, err := baton.New(o.addrs.addrs, baton.WithTLSConfig(tlsCfg), baton.WithOpsAddrs(opsclient.SplitAddrs(o.opsAddr)...),
		baton.WithAdminToken(token), baton.WithRetryFunc(func(err error, wait time.Duration) {
			if !o.quiet {
				fmt.Fprintf(s.stderr, "baton elect: %s; following again in %v\n", human.OneLine(err.Error()), wait.Round(time.Millisecond))
			}
		}))
	if err != nil {
		return usageError(s, "elect", err.Error())
	}
	leaders, err := client.Observe(ctx, o.name)
	if err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		return failure(s, "elect", strings.TrimPrefix(err.Error(), "observe "))
	}
	if o.verbose {
		if _, err := client.Leader(ctx, o.name); errors.Is(err, baton.ErrNoLeader) {
			fmt.Fprintf(s.stderr, "baton elect: nobody leads %s yet; waiting for a leader\n", o.name)
		}
	}
	for l := range leaders {
		fmt.Fprintf(s.stdout, "%s token %d\n", human.Escape(l.Value), l.Token)
	}
	return exitOK
}
