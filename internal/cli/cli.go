// Package cli is Baton's command line: the subcommands of the baton binary,
// their flags and BATON_* environment variables, and their exit codes.
//
// Exit codes common to all commands: 0 success, 1 a runtime failure (a
// listener that cannot bind, an unusable data directory, an ops API error),
// 2 a usage error (an unknown command, a bad flag or environment value, a
// stray argument, a refused configuration). baton run adds its own (75-78,
// and the command's status; see internal/runner), the operator commands 3 for "not
// found". Every error is one line on stderr; help goes to stdout.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/batonlock/baton/internal/human"
	"github.com/batonlock/baton/internal/supervise"
)

// Exit codes of Run.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// Run runs the baton command line with args (without the program name) and
// returns the process's exit status. Cancelling ctx (main does so on SIGTERM
// or SIGINT) starts a controlled shutdown of a long-running command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == supervise.WatchdogArg {
		// Not a subcommand: baton run starting itself as its command's
		// watchdog (internal/supervise).
		return supervise.RunWatchdog(args[1:])
	}
	return run(ctx, args, &sys{stdout: stdout, stderr: stderr, lookupEnv: os.LookupEnv})
}

// sys is what a command may use of the outside world, so that tests can run
// commands in parallel with their own output and environment.
type sys struct {
	stdout, stderr io.Writer
	lookupEnv      func(name string) (string, bool)
}

// command is one subcommand of baton.
type command struct {
	name    string
	summary string // one line for the command list, lower case, no period
	usage   string // the synopsis after "Usage: "
	help    string // what it does, examples; printed after the flags
	// flags returns the command's flags with their defaults, for help; nil
	// if it takes none.
	flags func() *flag.FlagSet
	// run runs the command c (this entry) with the arguments after its name.
	run func(ctx context.Context, s *sys, c *command, args []string) int
}

// commands is the table of subcommands, in the order help lists them. It is
// filled by init because help reads it: a plain initializer would be a cycle.
var commands []*command

func init() {
	commands = []*command{
		serveCommand(),
		runCommand(),
		lockCommand(),
		electCommand(),
		locksCommand(),
		releaseCommand(),
		kickCommand(),
		clusterCommand(),
		watchCommand(),
		versionCommand(),
		helpCommand(),
	}
}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func run(ctx context.Context, args []string, s *sys) int {
	if len(args) == 0 {
		return usageError(s, "", "no command given")
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		printUsage(s.stdout)
		return exitOK
	case "-version", "--version":
		c := versionCommand()
		return c.run(ctx, s, c, args[1:])
	}
	if strings.HasPrefix(name, "-") {
		return usageError(s, "", fmt.Sprintf("unknown flag %s (flags go after the command)", name))
	}
	c := findCommand(name)
	if c == nil {
		return usageError(s, "", fmt.Sprintf("unknown command %q", name))
	}
	return c.run(ctx, s, c, args[1:])
}

// usageError prints the one line of a usage error of command cmd ("" for
// baton itself) with the hint where to read more, and returns exitUsage.
func usageError(s *sys, cmd, msg string) int {
	prog, hint := "baton", "baton help"
	if cmd != "" {
		prog, hint = "baton "+cmd, "baton help "+cmd
	}
	fmt.Fprintf(s.stderr, "%s: %s; run '%s'\n", prog, human.OneLine(msg), hint)
	return exitUsage
}

// failure prints the one line of a runtime failure of command cmd and
// returns exitFailure.
func failure(s *sys, cmd, msg string) int {
	fmt.Fprintf(s.stderr, "baton %s: %s\n", cmd, human.OneLine(msg))
	return exitFailure
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Baton is a named-lock server: one client holds a lock, the others wait
in a FIFO queue, and a silent holder loses the lock after its lease.

Usage: baton <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'baton help <command>' for its flags and examples.
`)
}

func printCommandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.usage, c.summary)
	if c.flags != nil {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, c.flags())
		fmt.Fprint(w, `
Every flag may also come from the environment: BATON_ and the flag's name in
upper case with - as _ (BATON_IO_TIMEOUT=1s for -io-timeout). A flag on the
command line wins over the environment.
`)
	}
	if c.help != "" {
		fmt.Fprintf(w, "\n%s", c.help)
	}
}

func helpCommand() *command {
	return &command{
		name:    "help",
		summary: "show help for baton or one of its commands",
		usage:   "baton help [command]",
		help: `Examples:
  baton help
  baton help serve
`,
		run: runHelp,
	}
}

func runHelp(_ context.Context, s *sys, c *command, args []string) int {
	switch {
	case len(args) == 0:
		printUsage(s.stdout)
		return exitOK
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		printCommandHelp(s.stdout, c)
		return exitOK
	case len(args) > 1:
		return usageError(s, "help", fmt.Sprintf("unexpected argument %q", args[1]))
	}
	about := findCommand(args[0])
	if about == nil {
		return usageError(s, "", fmt.Sprintf("unknown command %q", args[0]))
	}
	printCommandHelp(s.stdout, about)
	return exitOK
}

func versionCommand() *command {
	return &command{
		name:    "version",
		summary: "print the version of baton",
		usage:   "baton version  (or baton -version)",
		help: `Prints the version, the commit and the Go version baton was built with. A
release build (scripts/dist.sh) sets the version and the commit; other builds
take them from the Go tool's build information ("(devel)" for a build from a
work tree).

Example:
  baton version
  (prints: baton v1.4.0 (commit 3f2a9c1d0e4b) go1.26.8 linux/amd64)
`,
		run: runVersion,
	}
}

func runVersion(_ context.Context, s *sys, c *command, args []string) int {
	fs := newFlagSet(c.name)
	if code, ok := parseFlags(s, c, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(s, "version", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	fmt.Fprintf(s.stdout, "baton %s (commit %s) %s %s/%s\n", version(), commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

// Set at build time by the release build (scripts/dist.sh):
//
//	-ldflags "-X github.com/batonlock/baton/internal/cli.buildVersion=v1.2.3
//	          -X github.com/batonlock/baton/internal/cli.buildCommit=abc1234"
//
// Empty in other builds, which fall back to the build information.
var (
	buildVersion string
	buildCommit  string
)

// version is the release version set at build time, else the main
// module's version from the build information ("(devel)" in a work tree).
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// commit is the commit set at build time, else the VCS revision the Go tool
// recorded (with "-dirty" for a modified tree), else "unknown".
func commit() string {
	if buildCommit != "" {
		return buildCommit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, st := range bi.Settings {
			switch st.Key {
			case "vcs.revision":
				rev = st.Value
			case "vcs.modified":
				if st.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if rev != "" {
			return rev[:min(len(rev), 12)] + dirty
		}
	}
	return "unknown"
}
