package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/baseline"
	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/peers"
	"github.com/batonlock/baton/bench/internal/proc"
	"github.com/batonlock/baton/bench/internal/profsig"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/system"
)

// runner is one run of the bench: what it built and started for the
// scenarios, and the results so far.
type runner struct {
	o        *options
	out, doc string // the results directory, and the page the tables go into ("" for none)
	tmp      string // removed at the end of the run
	exe      string // this program, re-executed in its roles
	bin      string // the baton binary built from o.repo
	prof     *profiler
	res      *report.Results
	logf     func(format string, args ...any)

	// srv is the shared standalone server of the scenarios that use one
	// (Scenario.UsesServer), while it runs; systems are Baton through it
	// and the peers, those that answered.
	srv     *batonsys.Server
	systems []system.System
}

func runBench(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	r, err := newRunner(ctx, o, stderr)
	if r != nil {
		defer r.close()
	}
	if err == nil {
		err = r.measureBaseline(ctx)
	}
	if err == nil {
		err = r.startSystems(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s %v\n", time.Now().Format("15:04:05"), err)
		return 1
	}
	last := lastUsingServer()
	for i, s := range registry {
		if o.scenarios[s.Name()] {
			s.Run(ctx, r)
		}
		if i == last && r.srv != nil {
			r.srv.Stop() // the scenarios after it start servers of their own
		}
	}
	return r.finish(ctx, stdout)
}

// newRunner prepares a run: the directories, and the baton binary built
// from o.repo. An error ends the run before any figure.
func newRunner(ctx context.Context, o *options, stderr io.Writer) (*runner, error) {
	r := &runner{o: o, out: o.out, doc: o.doc}
	r.logf = func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	r.res = &report.Results{Started: time.Now(), Command: commandLine(), Smoke: o.smoke, Machine: report.ThisMachine(), Versions: map[string]string{}}
	if _, err := loadgen.RaiseNoFile(); err != nil {
		r.logf("warning: %v", err)
	}
	if r.out == "" && r.doc == "" && !o.smoke {
		r.doc = filepath.Join(o.repo, "docs", "benchmarks.md")
	}
	var err error
	if r.out == "" {
		r.out = filepath.Join(o.repo, "docs", "bench")
		if o.smoke {
			if r.out, err = os.MkdirTemp("", "baton-bench-smoke-"); err != nil {
				return nil, err
			}
		}
	}
	if r.tmp, err = os.MkdirTemp("", "baton-bench-"); err != nil {
		return nil, err
	}
	if r.exe, err = proc.Executable(); err != nil {
		return r, err
	}
	if o.floorBefore != "" {
		if err := loadFloorBefore(o.floorBefore, r.res); err != nil {
			r.fail("-floor-before: %v", err)
		}
	}
	r.logf("building %s/cmd/baton", o.repo)
	if !o.profile {
		r.bin, err = batonsys.Build(ctx, o.repo, r.tmp)
		return r, err
	}
	// The servers write their profiles here (package profsig); the
	// children inherit the variable.
	r.prof = &profiler{profDir: filepath.Join(r.tmp, "profiles"), out: r.out, logf: r.logf}
	if err := os.MkdirAll(r.prof.profDir, 0o755); err != nil {
		return r, err
	}
	os.Setenv(profsig.Env, r.prof.profDir)
	r.bin, err = batonsys.BuildProfiled(ctx, o.repo, r.tmp, profsig.MainSource)
	return r, err
}

// close stops whatever the run still has running and removes its
// temporary directory.
func (r *runner) close() {
	for _, s := range r.systems {
		s.Close()
	}
	if r.srv != nil {
		r.srv.Stop()
	}
	os.RemoveAll(r.tmp)
}

// fail records that a measurement failed: the run goes on and exits 1.
func (r *runner) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Failures = append(r.res.Failures, msg)
	r.logf("FAILED: %s", msg)
}

// failOrSkip is fail for Baton; a peer that cannot run a scenario (too
// many clients for its connection limit, say) is skipped with the reason.
func (r *runner) failOrSkip(sys string, format string, args ...any) {
	if strings.HasPrefix(sys, "baton") {
		r.fail(format, args...)
		return
	}
	msg := fmt.Sprintf(format, args...)
	r.res.Skipped = append(r.res.Skipped, msg)
	r.logf("skipped: %s", msg)
}

// skip records what the run left out, and why.
func (r *runner) skip(msg string) {
	r.res.Skipped = append(r.res.Skipped, msg)
	r.logf("%s", msg)
}

// want reports whether the run measures system name (-systems).
func (r *runner) want(name string) bool { return len(r.o.systems) == 0 || r.o.systems[name] }

// measureBaseline measures the machine's loopback against an echo server
// in a process of its own: the yardstick of every figure.
func (r *runner) measureBaseline(ctx context.Context) error {
	echo, err := proc.Start(r.exe, "-role", "echo")
	if err != nil {
		return err
	}
	defer echo.Stop(5 * time.Second)
	echoAddr, notifyAddr, err := twoAddrs(ctx, echo)
	if err != nil {
		return fmt.Errorf("echo server: %w", err)
	}
	r.logf("baseline against the echo server at %s, close-notify at %s (pid %d)", echoAddr, notifyAddr, echo.PID())
	bl, err := baseline.Measure(ctx, echoAddr, notifyAddr, baselineSizes(r.o.smoke))
	if err != nil {
		r.fail("baseline: %v", err)
		return nil
	}
	r.res.Baseline = &bl
	r.logf("  loopback RTT p50 %s p99 %s; after 20 ms idle p50 %s p99 %s; connect+close p50 %s; connect+echo+close p50 %s; close-notify p50 %s, after 20 ms idle %s",
		report.Dur(bl.RTT.P50), report.Dur(bl.RTT.P99), report.Dur(bl.RTTAfterIdle.P50), report.Dur(bl.RTTAfterIdle.P99),
		report.Dur(bl.ConnectClose.P50), report.Dur(bl.ConnectEchoClose.P50), report.Dur(bl.CloseNotify.P50), report.Dur(bl.CloseNotifyAfterIdle.P50))
	return nil
}

func baselineSizes(smoke bool) baseline.Sizes {
	if smoke {
		return baseline.Sizes{RoundTrips: 2000, IdleTrips: 20, Connects: 200}
	}
	return baseline.Sizes{RoundTrips: 20000, IdleTrips: 250, Connects: 3000}
}

// twoAddrs reads the first line of a role that serves on two addresses,
// "ADDR ADDR".
func twoAddrs(ctx context.Context, p *proc.Process) (string, string, error) {
	lineCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	line, err := p.ReadLine(lineCtx)
	if err != nil {
		return "", "", err
	}
	a, b, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return "", "", fmt.Errorf("first line %q, want two addresses", line)
	}
	return a, b, nil
}

// startSystems starts the shared Baton server, if a scenario of the run
// uses it, and finds the systems to measure: Baton through that server,
// and outside -smoke the peers the environment names. A system that does
// not answer is skipped with the reason.
func (r *runner) startSystems(ctx context.Context) error {
	uses, flags := false, []string(nil)
	for _, s := range registry {
		if u, f := s.UsesServer(); u && r.o.scenarios[s.Name()] {
			uses, flags = true, append(flags, f...)
		}
	}
	var systems []system.System
	if uses && (r.want("baton") || r.want("baton-wire")) {
		srv, err := batonsys.StartServer(ctx, r.bin, r.tmp, flags...)
		if err != nil {
			return err
		}
		r.srv = srv
		r.logf("baton serving at %s (pid %d)", srv.Addr, srv.PID())
		if r.want("baton") {
			systems = append(systems, batonsys.NewSystem(srv, r.bin, 10*time.Second))
		}
		if r.want("baton-wire") {
			systems = append(systems, batonsys.NewRawSystem(srv))
		}
	}
	if !r.o.smoke {
		systems = append(systems, r.peers()...)
	}
	for _, s := range systems {
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := s.Version(vctx)
		cancel()
		if err != nil {
			r.res.Skipped = append(r.res.Skipped, fmt.Sprintf("%s: %v", s.Name(), err))
			r.logf("skipping %s: %v", s.Name(), err)
			s.Close()
			continue
		}
		r.res.Versions[s.Name()] = v
		r.systems = append(r.systems, s)
	}
	for _, s := range r.res.Skipped {
		r.logf("skipped: %s", s)
	}
	return nil
}

// peers are the lock servers the environment names (BENCH_*) that the run
// measures; a wanted one that is not named is skipped with how to name it.
func (r *runner) peers() []system.System {
	var systems []system.System
	configured := map[string]bool{}
	for _, p := range peers.Systems(peers.ConfigFromEnv()) {
		configured[p.Name()] = true
		if r.want(p.Name()) {
			systems = append(systems, p)
		} else {
			p.Close()
		}
	}
	for _, name := range []string{"redis", "redis-1ms", "postgres", "etcd", "zookeeper"} {
		if r.want(name) && !configured[name] {
			r.res.Skipped = append(r.res.Skipped, fmt.Sprintf("%s: not configured: BENCH_* not set (start the peers with bench/peers/start.sh and source /tmp/baton-peers/peers.env)", name))
		}
	}
	return systems
}

// finish writes the results and the tables, and returns the exit code:
// 1 if any measurement failed.
func (r *runner) finish(ctx context.Context, stdout io.Writer) int {
	r.res.Elapsed = time.Since(r.res.Started)
	r.res.Machine.LoadEnd = report.LoadAvg()
	if ctx.Err() != nil {
		r.res.Failures = append(r.res.Failures, "interrupted: "+ctx.Err().Error())
	}
	if err := report.Write(r.out, r.res); err != nil {
		r.logf("writing results to %s: %v", r.out, err)
		return 1
	}
	md := report.Markdown(r.res)
	if r.doc != "" {
		if err := report.UpdateDoc(r.doc, md); err != nil {
			r.logf("%v", err)
			return 1
		}
		r.logf("tables written into %s", r.doc)
	}
	fmt.Fprint(stdout, md)
	r.logf("results in %s", r.out)
	if len(r.res.Failures) > 0 {
		return 1
	}
	return 0
}

// runRender redraws the outputs of an earlier run from its results.json.
func runRender(o *options, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(o.render)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	var res report.Results
	if err := json.Unmarshal(b, &res); err != nil {
		fmt.Fprintf(stderr, "bench: %s: %v\n", o.render, err)
		return 1
	}
	if o.floorBefore != "" {
		if err := loadFloorBefore(o.floorBefore, &res); err != nil {
			fmt.Fprintf(stderr, "bench: -floor-before: %v\n", err)
			return 1
		}
	}
	out := o.out
	if out == "" {
		out = filepath.Dir(o.render)
	}
	if err := report.Write(out, &res); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	md := report.Markdown(&res)
	if o.doc != "" {
		if err := report.UpdateDoc(o.doc, md); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
	}
	fmt.Fprint(stdout, md)
	return 0
}

// serverHandoverMean is Baton's own mean handover time since its metrics
// read m0 (baton_handover_latency_seconds: from the end of the holder's
// session to the push written), or 0 if none or unknown.
func serverHandoverMean(ctx context.Context, srv *batonsys.Server, m0 map[string]float64) time.Duration {
	m1, err := srv.Metrics(ctx)
	if err != nil {
		return 0
	}
	return handoverMean(m0, m1)
}

// handoverMean is the mean of baton_handover_latency_seconds between the
// metrics m0 and m1, or 0 if no handover was counted.
func handoverMean(m0, m1 map[string]float64) time.Duration {
	n := m1["baton_handover_latency_seconds_count"] - m0["baton_handover_latency_seconds_count"]
	if n <= 0 {
		return 0
	}
	sum := m1["baton_handover_latency_seconds_sum"] - m0["baton_handover_latency_seconds_sum"]
	return time.Duration(sum / n * 1e9)
}

// commandLine is how this run was invoked, for the results.
func commandLine() string {
	return strings.TrimSpace("go run . " + strings.Join(os.Args[1:], " "))
}
