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
	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/system"
)

// sizes are the scenario sizes of a full run or a smoke run.
type sizes struct {
	baseline      baseline.Sizes
	waiters       []int // handover queue depths
	holdWaiters   int   // queue depth of the run with a hold
	hold          time.Duration
	cycleClients  []int
	detectLeases  []time.Duration
	detectSamples []int
	detectPar     int
	scaleSettle   time.Duration
	scaleWindow   time.Duration
	scaleProbe    time.Duration
	pollQueue     int // waiters beside the polling scenario's handover
}

func sizesFor(o *options) sizes {
	if o.smoke {
		return sizes{
			baseline:      baseline.Sizes{RoundTrips: 2000, IdleTrips: 20, Connects: 200},
			waiters:       []int{8, 50},
			holdWaiters:   8,
			hold:          baseline.Idle,
			cycleClients:  []int{4, 16},
			detectLeases:  []time.Duration{50 * time.Millisecond},
			detectSamples: []int{10},
			detectPar:     5,
			scaleSettle:   500 * time.Millisecond,
			scaleWindow:   time.Second,
			scaleProbe:    500 * time.Millisecond,
			pollQueue:     200,
		}
	}
	return sizes{
		baseline:      baseline.Sizes{RoundTrips: 20000, IdleTrips: 250, Connects: 3000},
		waiters:       []int{8, 1000},
		holdWaiters:   8,
		hold:          baseline.Idle,
		cycleClients:  []int{16, 256},
		detectLeases:  []time.Duration{100 * time.Millisecond, time.Second},
		detectSamples: []int{200, 40},
		detectPar:     10,
		scaleSettle:   5 * time.Second,
		scaleWindow:   10 * time.Second,
		scaleProbe:    3 * time.Second,
		pollQueue:     10000,
	}
}

func runBench(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	started := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	if _, err := loadgen.RaiseNoFile(); err != nil {
		logf("warning: %v", err)
	}
	sz := sizesFor(o)
	out, doc := o.out, o.doc
	if out == "" && doc == "" && !o.smoke {
		doc = filepath.Join(o.repo, "docs", "benchmarks.md")
	}
	if out == "" {
		out = filepath.Join(o.repo, "docs", "bench")
		if o.smoke {
			dir, err := os.MkdirTemp("", "baton-bench-smoke-")
			if err != nil {
				logf("%v", err)
				return 1
			}
			out = dir
		}
	}
	tmp, err := os.MkdirTemp("", "baton-bench-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	exe, err := proc.Executable()
	if err != nil {
		logf("%v", err)
		return 1
	}

	res := &report.Results{
		Started:  started,
		Command:  commandLine(),
		Smoke:    o.smoke,
		Machine:  report.ThisMachine(),
		Versions: map[string]string{},
	}
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		res.Failures = append(res.Failures, msg)
		logf("FAILED: %s", msg)
	}
	// A peer that cannot run a scenario (too many clients for its
	// connection limit, say) is skipped with the reason; Baton failing
	// one is a failure of the run.
	failOrSkip := func(sys string, format string, args ...any) {
		if strings.HasPrefix(sys, "baton") {
			fail(format, args...)
			return
		}
		msg := fmt.Sprintf(format, args...)
		res.Skipped = append(res.Skipped, msg)
		logf("skipped: %s", msg)
	}

	var (
		prof *profiler
		bin  string
	)
	logf("building %s/cmd/baton", o.repo)
	if o.profile {
		// The servers write their profiles here (package profsig); the
		// children inherit the variable.
		prof = &profiler{profDir: filepath.Join(tmp, "profiles"), out: out, logf: logf}
		if err := os.MkdirAll(prof.profDir, 0o755); err != nil {
			logf("%v", err)
			return 1
		}
		os.Setenv(profsig.Env, prof.profDir)
		bin, err = batonsys.BuildProfiled(ctx, o.repo, tmp, profsig.MainSource)
	} else {
		bin, err = batonsys.Build(ctx, o.repo, tmp)
	}
	if err != nil {
		logf("%v", err)
		return 1
	}

	// The baseline: an echo server in a process of its own.
	echo, err := proc.Start(exe, "-role", "echo")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer echo.Stop(5 * time.Second)
	lineCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	line, err := echo.ReadLine(lineCtx)
	cancel()
	echoAddr, notifyAddr, ok := strings.Cut(strings.TrimSpace(line), " ")
	if err == nil && !ok {
		err = fmt.Errorf("first line %q, want two addresses", line)
	}
	if err != nil {
		logf("echo server: %v", err)
		return 1
	}
	logf("baseline against the echo server at %s, close-notify at %s (pid %d)", echoAddr, notifyAddr, echo.PID())
	bl, err := baseline.Measure(ctx, echoAddr, notifyAddr, sz.baseline)
	if err != nil {
		fail("baseline: %v", err)
	} else {
		res.Baseline = &bl
		logf("  loopback RTT p50 %s p99 %s; after 20 ms idle p50 %s p99 %s; connect+close p50 %s; connect+echo+close p50 %s; close-notify p50 %s, after 20 ms idle %s",
			report.Dur(bl.RTT.P50), report.Dur(bl.RTT.P99), report.Dur(bl.RTTAfterIdle.P50), report.Dur(bl.RTTAfterIdle.P99),
			report.Dur(bl.ConnectClose.P50), report.Dur(bl.ConnectEchoClose.P50), report.Dur(bl.CloseNotify.P50), report.Dur(bl.CloseNotifyAfterIdle.P50))
	}
	echo.Stop(5 * time.Second)

	// Baton: the real server, a process of its own.
	var systems []system.System
	var srv *batonsys.Server
	needServer := o.scenarios["handover"] || o.scenarios["cycles"] || o.scenarios["semaphore"] || o.scenarios["detect"] || o.scenarios["floor"] || o.scenarios["polling"]
	if (want(o, "baton") || want(o, "baton-wire")) && needServer {
		var extra []string
		if o.scenarios["floor"] {
			// Every address, so that each of the floor scenario's runs
			// dials it at a loopback address of its own (floor.Fresh).
			extra = []string{"-addr", "0.0.0.0:0"}
		}
		srv, err = batonsys.StartServer(ctx, bin, tmp, extra...)
		if err != nil {
			logf("%v", err)
			return 1
		}
		defer srv.Stop()
		logf("baton serving at %s (pid %d)", srv.Addr, srv.PID())
		if want(o, "baton") {
			systems = append(systems, batonsys.NewSystem(srv, bin, 10*time.Second))
		}
		if want(o, "baton-wire") {
			systems = append(systems, batonsys.NewRawSystem(srv))
		}
	}
	if !o.smoke {
		for _, p := range peers.Systems(peers.ConfigFromEnv()) {
			if want(o, p.Name()) {
				systems = append(systems, p)
			} else {
				p.Close()
			}
		}
		for _, name := range []string{"redis", "redis-1ms", "postgres", "etcd", "zookeeper"} {
			if want(o, name) && !has(systems, name) {
				res.Skipped = append(res.Skipped, fmt.Sprintf("%s: not configured: BENCH_* not set (start the peers with bench/peers/start.sh and source /tmp/baton-peers/peers.env)", name))
			}
		}
	}
	var live []system.System
	for _, s := range systems {
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := s.Version(vctx)
		cancel()
		if err != nil {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s: %v", s.Name(), err))
			logf("skipping %s: %v", s.Name(), err)
			s.Close()
			continue
		}
		res.Versions[s.Name()] = v
		live = append(live, s)
	}
	defer func() {
		for _, s := range live {
			s.Close()
		}
	}()
	for _, s := range res.Skipped {
		logf("skipped: %s", s)
	}

	if o.scenarios["handover"] {
		for _, s := range live {
			runs := make([]scenario.HandoverConfig, 0, len(sz.waiters)+1)
			for _, n := range sz.waiters {
				runs = append(runs, scenario.HandoverConfig{Waiters: n, Duration: o.duration})
			}
			runs = append(runs, scenario.HandoverConfig{Waiters: sz.holdWaiters, Hold: sz.hold, Duration: o.duration})
			for i, cfg := range runs {
				if ctx.Err() != nil {
					break
				}
				cfg.Name = fmt.Sprintf("handover-%d", i)
				logf("handover: %s, %d waiters, hold %v, %v", s.Name(), cfg.Waiters, cfg.Hold, cfg.Duration)
				var m0 map[string]float64
				if srv != nil && strings.HasPrefix(s.Name(), "baton") {
					m0, _ = srv.Metrics(ctx)
				}
				h, err := scenario.Handover(ctx, s, cfg)
				if m0 != nil {
					h.ServerMean = serverHandoverMean(ctx, srv, m0)
				}
				if err != nil {
					failOrSkip(s.Name(), "handover %s with %d waiters: %v", s.Name(), cfg.Waiters, err)
					continue
				}
				logf("  p50 %s p99 %s max %s; %.0f handoffs/s; fairness %s; %d errors",
					report.Dur(h.Latency.P50), report.Dur(h.Latency.P99), report.Dur(h.Latency.Max), h.HandoffsPerSec,
					report.Fairness(h.GrantsMin, h.GrantsMax), h.Errors)
				res.Handover = append(res.Handover, h)
			}
		}
	}
	if o.scenarios["polling"] && srv != nil && want(o, "baton") && ctx.Err() == nil {
		loadgen.RaiseNoFile() // the queue's sessions are this process's connections
		cfg := scenario.PollingConfig{OpsAddr: srv.OpsAddr, Addr: srv.Addr, Queue: sz.pollQueue, Pollers: 20,
			Waiters: 8, Window: o.duration, Rounds: 2}
		logf("polling: baton, handover of 8 waiters beside %d queued sessions, without and with %d loops polling GET /v1/locks, %d rounds of %v each", cfg.Queue, cfg.Pollers, cfg.Rounds, cfg.Window)
		p, err := scenario.Polling(ctx, batonsys.NewSystem(srv, bin, 10*time.Second), cfg)
		if err != nil {
			fail("polling: %v", err)
		} else {
			logf("  handover p50 %s p99 %s without polling, p50 %s p99 %s with %d pollers (%d listings, p50 %s each); %d errors",
				report.Dur(p.Quiet.P50), report.Dur(p.Quiet.P99), report.Dur(p.Polled.P50), report.Dur(p.Polled.P99),
				p.Pollers, p.Listings, report.Dur(p.ListingP50), p.Errors)
			res.Polling = &p
		}
	}
	if o.scenarios["cycles"] {
		for _, s := range live {
			for _, n := range sz.cycleClients {
				if ctx.Err() != nil {
					break
				}
				logf("cycles: %s, %d clients, %v", s.Name(), n, o.duration)
				c, err := scenario.Cycles(ctx, s, n, o.duration)
				if err != nil {
					failOrSkip(s.Name(), "cycles %s with %d clients: %v", s.Name(), n, err)
					continue
				}
				logf("  p50 %s p99 %s max %s; %.0f cycles/s; %d errors", report.Dur(c.Latency.P50),
					report.Dur(c.Latency.P99), report.Dur(c.Latency.Max), c.CyclesPerSec, c.Errors)
				res.Cycles = append(res.Cycles, c)
			}
		}
	}
	if o.scenarios["semaphore"] {
		runSemaphore(ctx, o, srv, res, logf, failOrSkip)
	}
	if o.scenarios["detect"] && srv != nil {
		for i, lease := range sz.detectLeases {
			if ctx.Err() != nil {
				break
			}
			logf("detect: baton, lease %v, %d samples", lease, sz.detectSamples[i])
			d, err := scenario.Detect(ctx, srv.Addr, lease, sz.detectSamples[i], sz.detectPar)
			if err != nil {
				fail("detect with lease %v: %v", lease, err)
				continue
			}
			logf("  error p50 %s p99 %s max %s; %d early", report.Dur(d.Error.P50), report.Dur(d.Error.P99), report.Dur(d.Error.Max), d.Early)
			res.Detect = append(res.Detect, d)
		}
	}
	if o.scenarios["floor"] && srv != nil && ctx.Err() == nil {
		fl, err := runFloorScenario(ctx, o, exe, bin, srv, prof, logf)
		if err != nil {
			fail("floor: %v", err)
		}
		res.Floor = fl
	}
	if srv != nil {
		srv.Stop() // the scale steps each start a fresh server
	}
	if o.scenarios["scale"] && want(o, "baton") {
		nofile, _ := loadgen.RaiseNoFile()
		for _, n := range o.scale {
			if ctx.Err() != nil {
				break
			}
			// The server holds a descriptor per session, and so does the
			// load generator: leave each some for everything else.
			if most := int(nofile) - 1500; nofile > 0 && n > most {
				msg := fmt.Sprintf("scale step of %d sessions: the open-file limit (%d) allows %d; measuring %d", n, nofile, most, most)
				res.Skipped = append(res.Skipped, msg)
				logf("%s", msg)
				n = most
			}
			if n < 2 {
				break
			}
			logf("scale: baton, %d sessions", n)
			sc, err := scenario.Scale(ctx, scenario.ScaleConfig{
				Sessions: n, ShortLease: o.shortLease, LongLease: 30 * time.Second,
				Settle: sz.scaleSettle, Window: sz.scaleWindow, Probe: sz.scaleProbe,
				BatonBin: bin, Dir: tmp,
				LoadGen: func(cfg loadgen.Config) (string, []string) { return exe, scenario.LoadGenArgs(cfg) },
			})
			if err != nil {
				fail("scale with %d sessions: %v", n, err)
				continue
			}
			logf("  %d opened; RSS/session %.0f B, heap/session %.0f B, stacks/session %.0f B; %.0f heartbeats/s at %s CPU each; %d lost; handover p50 %s p99 %s",
				sc.Opened, sc.RSSPerSession, sc.HeapPerSession, sc.StackPerSession, sc.HeartbeatsPerSec,
				report.Dur(sc.CPUPerHeartbeat), sc.Lost, report.Dur(sc.Handover.Latency.P50), report.Dur(sc.Handover.Latency.P99))
			res.Scale = append(res.Scale, sc)
		}
	}

	if o.floorBefore != "" {
		if err := loadFloorBefore(o.floorBefore, res); err != nil {
			fail("-floor-before: %v", err)
		}
	}
	runCluster(ctx, o, bin, tmp, res, logf, fail)

	res.Elapsed = time.Since(started)
	res.Machine.LoadEnd = report.LoadAvg()
	if ctx.Err() != nil {
		res.Failures = append(res.Failures, "interrupted: "+ctx.Err().Error())
	}
	if err := report.Write(out, res); err != nil {
		logf("writing results to %s: %v", out, err)
		return 1
	}
	md := report.Markdown(res)
	if doc != "" {
		if err := report.UpdateDoc(doc, md); err != nil {
			logf("%v", err)
			return 1
		}
		logf("tables written into %s", doc)
	}
	fmt.Fprint(stdout, md)
	logf("results in %s", out)
	if len(res.Failures) > 0 {
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

func want(o *options, name string) bool { return len(o.systems) == 0 || o.systems[name] }

func has(systems []system.System, name string) bool {
	for _, s := range systems {
		if s.Name() == name {
			return true
		}
	}
	return false
}

// serverHandoverMean is Baton's own mean handover time since its metrics
// read m0 (baton_handover_latency_seconds: from the end of the holder's
// session to the push written), or 0 if none or unknown.
func serverHandoverMean(ctx context.Context, srv *batonsys.Server, m0 map[string]float64) time.Duration {
	m1, err := srv.Metrics(ctx)
	if err != nil {
		return 0
	}
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
