// Command bench measures Baton against its peers (Redis, PostgreSQL
// advisory locks, etcd, ZooKeeper) on the same machine in the same run:
// handover, uncontended cycles, sessions at scale, failure detection, and
// the baseline of raw loopback TCP every figure is held against.
//
// Run it from the bench directory:
//
//	go run . -smoke                 # CI: tiny sizes, ~1-2 s a scenario, no peers
//	go run .                        # the full run, Baton and the peers named by BENCH_* (bench/peers/start.sh)
//
// Results (results.json, the tables as Markdown, and PNG charts) go to -out.
//
// Each scenario is a Scenario in a file of its own (handover.go, scale.go,
// ...) and a row of the registry (scenarios.go); runner (bench.go) builds
// the server, measures the baseline and starts what the scenarios share.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command; it returns the exit code: 0 when every
// scenario ran, 1 when one failed, 2 on bad flags.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	switch o.role {
	case "":
	case "echo":
		return runEcho(ctx, stdout, stderr)
	case "floor":
		return runFloor(ctx, stdout, stderr)
	case "load":
		return runLoad(ctx, o, stdin, stdout, stderr)
	case "claims":
		return runClaims(ctx, o, stdout, stderr)
	case "hotlock":
		return runHotLock(ctx, o, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "bench: unknown -role %q\n", o.role)
		return 2
	}
	if o.render != "" {
		return runRender(o, stdout, stderr)
	}
	return runBench(ctx, o, stdout, stderr)
}
