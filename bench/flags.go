package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/peers"
)

type options struct {
	scenarios   map[string]bool
	systems     map[string]bool // empty: every system available
	smoke       bool
	out         string
	duration    time.Duration
	scale       []int
	repo        string
	doc         string
	render      string
	profile     bool
	floorSess   int
	floorRounds int
	floorBefore string
	dflockd     string // the dflockd binary of the semaphore scenario
	semRounds   int

	// Hidden: the roles the bench re-executes itself in.
	role        string
	addr        string
	sessions    int
	shortLease  time.Duration
	longLease   time.Duration
	sources     int
	dialPar     int
	prefix      string
	workers     int  // the claims role's workers, the hot-lock role's contenders
	normalClose bool // the claims and hot-lock roles'
	serverPID   int  // the hot-lock role's: the server whose CPU it reads

	failovers    int      // faults of each kind in the failover scenario
	clusterFlags []string // extra flags of every cluster node
}

// listFlags are the flags that parseFlags reads as lists.
type listFlags struct{ scenarios, systems, scale, clusterFlags *string }

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lists := defineFlags(fs, o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return nil, fmt.Errorf("unexpected argument")
	}
	if err := o.setLists(lists, stderr); err != nil {
		return nil, err
	}
	if err := o.setSizes(stderr); err != nil {
		return nil, err
	}
	return o, nil
}

// defineFlags defines the flags of fs into o, but for those read as lists.
func defineFlags(fs *flag.FlagSet, o *options) listFlags {
	allScenarios := scenarioNames()
	scen := fs.String("scenario", "all", "comma-separated scenarios: "+strings.Join(allScenarios, ",")+", or all (the baseline always runs)")
	syss := fs.String("systems", "", "comma-separated systems to measure (baton, baton-wire: the same server in raw frames without the Go client, baton-cluster: the cluster and failover scenarios, redis, redis-1ms: redis retrying every millisecond, postgres, etcd, zookeeper, and in the semaphore scenario dflockd: a connection per claim, dflockd-conn: one kept connection per client, beside baton-wire, which baton selects there too); empty: every one available")
	fs.BoolVar(&o.smoke, "smoke", false, "tiny sizes, about a second a scenario, no peers (what CI runs)")
	fs.StringVar(&o.out, "out", "", "directory for results.json, results.md and the charts (default ../docs/bench, or a temporary directory with -smoke)")
	fs.DurationVar(&o.duration, "duration", 0, "measured window of each handover and cycles run (default 5s, 1s with -smoke)")
	scale := fs.String("scale-sessions", "", "comma-separated session counts of the scale scenario (default 10000,18000; 200 with -smoke)")
	fs.StringVar(&o.repo, "repo", "..", "the Baton repository, whose ./cmd/baton is built and measured")
	fs.IntVar(&o.failovers, "failovers", 0, "kill -9s of the leader in the failover scenario, and as many SIGTERMs (default 100, 2 with -smoke)")
	clusterFlags := fs.String("cluster-flags", "", "extra `flags` for every node of the cluster scenarios, space-separated (e.g. '-raft-heartbeat-timeout=300ms -raft-election-timeout=300ms')")
	fs.StringVar(&o.doc, "doc", "", "markdown file whose generated results section is replaced by this run's tables (default ../docs/benchmarks.md for a full run, none with -smoke or -out)")

	fs.BoolVar(&o.profile, "profile", false, "take CPU profiles of Baton and of the floor server in each floor scenario's window (into -out/profiles, with `go tool pprof -top` beside each); the profiling costs the servers a little CPU")
	fs.IntVar(&o.floorSess, "floor-sessions", 0, "held sessions of the floor scenario's heartbeat figure (default 10000; 40 with -smoke)")
	fs.IntVar(&o.floorRounds, "floor-rounds", 0, "rounds of the floor scenario, the floor and Baton in turn; its table gives medians (default 3; 1 with -smoke)")
	fs.StringVar(&o.floorBefore, "floor-before", "", "results.json of an earlier run with the floor scenario (for example one of the code before a change): its floor ratios go beside this run's, in the table and the chart (with -render too)")
	fs.StringVar(&o.dflockd, "dflockd", "", "the dflockd binary of the semaphore scenario (default $"+peers.DflockdEnv+", else dflockd on PATH; get it with: "+peers.DflockdHowTo+")")
	fs.IntVar(&o.semRounds, "semaphore-rounds", 0, "rounds of the semaphore scenario, every system in turn in each (default 3; 1 with -smoke)")
	fs.StringVar(&o.render, "render", "", "measure nothing: redraw the tables, charts and doc section from this results.json")
	fs.StringVar(&o.role, "role", "", "internal: run as the echo server, the floor server, the load generator, the claims role or the hot-lock role")
	fs.StringVar(&o.addr, "addr", "", "internal: load generator's server address")
	fs.IntVar(&o.sessions, "sessions", 0, "internal: load generator's session count")
	fs.DurationVar(&o.shortLease, "short-lease", time.Second, "the short lease of the scale scenario (half its sessions; the other half 30s)")
	fs.DurationVar(&o.longLease, "long-lease", 30*time.Second, "internal: the long lease of the scale scenario")
	fs.IntVar(&o.sources, "sources", 1, "internal: source addresses 127.0.0.1 .. 127.0.0.N")
	fs.IntVar(&o.dialPar, "dial-par", 64, "internal: dials in flight")
	fs.StringVar(&o.prefix, "lock-prefix", "", "internal: load generator's prefix of lock names")
	fs.IntVar(&o.workers, "workers", 16, "internal: the claims role's workers, the hot-lock role's contenders")
	fs.BoolVar(&o.normalClose, "normal-close", false, "internal: the claims and hot-lock roles' clients close normally instead of with a reset")
	fs.IntVar(&o.serverPID, "server-pid", 0, "internal: the hot-lock role's server, whose CPU time it reads over its window")
	return listFlags{scen, syss, scale, clusterFlags}
}

// setLists reads the list flags into o.
func (o *options) setLists(l listFlags, stderr io.Writer) error {
	allScenarios := scenarioNames()
	o.scenarios = map[string]bool{"baseline": true}
	for _, s := range split(*l.scenarios) {
		if s == "all" {
			for _, a := range allScenarios {
				o.scenarios[a] = true
			}
			continue
		}
		if !contains(allScenarios, s) {
			fmt.Fprintf(stderr, "bench: unknown scenario %q (want %s or all)\n", s, strings.Join(allScenarios, ","))
			return fmt.Errorf("bad scenario")
		}
		o.scenarios[s] = true
	}
	o.systems = map[string]bool{}
	for _, s := range split(*l.systems) {
		o.systems[s] = true
	}
	o.clusterFlags = strings.Fields(*l.clusterFlags)
	for _, s := range split(*l.scale) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			fmt.Fprintf(stderr, "bench: -scale-sessions: %q is not a session count of 2 or more\n", s)
			return fmt.Errorf("bad scale")
		}
		o.scale = append(o.scale, n)
	}
	if len(o.scale) == 0 {
		o.scale = pick(o.smoke, []int{10000, 18000}, []int{200})
	}
	return nil
}

// setSizes checks the sizes given and gives the others their default,
// the full run's or -smoke's.
func (o *options) setSizes(stderr io.Writer) error {
	if o.duration < 0 {
		fmt.Fprintf(stderr, "bench: -duration %v must not be negative\n", o.duration)
		return fmt.Errorf("bad duration")
	}
	defaultTo(&o.duration, o.smoke, 5*time.Second, time.Second)
	if o.failovers < 0 {
		fmt.Fprintf(stderr, "bench: -failovers %d must not be negative\n", o.failovers)
		return fmt.Errorf("bad failovers")
	}
	defaultTo(&o.failovers, o.smoke, 100, 2)
	if o.floorSess < 0 || o.floorSess == 1 {
		fmt.Fprintf(stderr, "bench: -floor-sessions %d: want 2 or more\n", o.floorSess)
		return fmt.Errorf("bad floor sessions")
	}
	defaultTo(&o.floorSess, o.smoke, 10000, 40)
	if o.floorRounds < 0 {
		fmt.Fprintf(stderr, "bench: -floor-rounds %d must not be negative\n", o.floorRounds)
		return fmt.Errorf("bad floor rounds")
	}
	defaultTo(&o.floorRounds, o.smoke, 3, 1)
	if o.semRounds < 0 {
		fmt.Fprintf(stderr, "bench: -semaphore-rounds %d must not be negative\n", o.semRounds)
		return fmt.Errorf("bad semaphore rounds")
	}
	defaultTo(&o.semRounds, o.smoke, 3, 1)
	if o.dflockd != "" {
		if _, err := peers.FindDflockd(o.dflockd); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return err
		}
	}
	return nil
}

// defaultTo sets *v, if it is zero (the flag not given), to full, or to
// small with -smoke.
func defaultTo[T comparable](v *T, smoke bool, full, small T) {
	var zero T
	switch {
	case *v != zero:
	case smoke:
		*v = small
	default:
		*v = full
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
