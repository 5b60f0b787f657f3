package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/floor"
	"github.com/batonlock/baton/bench/internal/loadgen"
	"github.com/batonlock/baton/bench/internal/proc"
	"github.com/batonlock/baton/bench/internal/profsig"
	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// floorSizes sizes the floor scenario.
func floorSizes(o *options, exe string) floor.Config {
	cfg := floor.Config{
		Contenders: 8, Duration: o.duration, Workers: 16, Sessions: o.floorSess,
		Settle: 3 * time.Second, Window: 10 * time.Second, Rounds: o.floorRounds,
		LoadGen: func(cfg loadgen.Config) (string, []string) { return exe, scenario.LoadGenArgs(cfg) },
	}
	if o.smoke {
		cfg.Settle, cfg.Window = 200*time.Millisecond, 500*time.Millisecond
	}
	return cfg
}

// profiler takes the CPU profiles of one run's floor scenarios, when
// -profile asks for them; profDir is the directory the servers write to
// (profsig.Env), out the results directory.
type profiler struct {
	profDir, out string
	logf         func(string, ...any)
	taken        []profile
}

type profile struct{ label, bin, file string }

// target returns the Profile function of a Target for the server pid
// built as bin, or nil when no profiles are wanted.
func (p *profiler) target(name string, pid int, bin string) func(string) func() {
	if p == nil {
		return nil
	}
	return func(label string) func() {
		file := filepath.Join(p.out, "profiles", name+"-"+label+".pprof")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			p.logf("profile %s %s: %v", name, label, err)
			return func() {}
		}
		c, err := profsig.Start(pid, p.profDir, file)
		if err != nil {
			p.logf("profile %s %s: %v", name, label, err)
			return func() {}
		}
		return func() {
			if err := c.Stop(); err != nil {
				p.logf("profile %s %s: %v", name, label, err)
				return
			}
			p.taken = append(p.taken, profile{label: name + "-" + label, bin: bin, file: file})
		}
	}
}

// tops writes `go tool pprof -top` beside each profile taken and returns
// label -> profile file.
func (p *profiler) tops(ctx context.Context) map[string]string {
	if p == nil {
		return nil
	}
	m := map[string]string{}
	for _, t := range p.taken {
		top, err := profsig.Top(ctx, t.bin, t.file, 30)
		if err != nil {
			p.logf("%v", err)
			continue
		}
		if err := os.WriteFile(strings.TrimSuffix(t.file, ".pprof")+".top.txt", []byte(top), 0o644); err != nil {
			p.logf("%v", err)
		}
		m[t.label] = t.file
	}
	return m
}

// floorScenario: Baton against the floor lock server, a server that does
// only what the model needs, on the same clients in the same minutes.
type floorScenario struct{}

func (floorScenario) Name() string { return "floor" }

// UsesServer: the shared server listens on every address, so that each
// of the floor scenario's runs dials it at a loopback address of its own
// (floor.Fresh).
func (floorScenario) UsesServer() (bool, []string) { return true, []string{"-addr", "0.0.0.0:0"} }

func (floorScenario) Run(ctx context.Context, r *runner) {
	if r.srv == nil || ctx.Err() != nil {
		return
	}
	fl, err := runFloorScenario(ctx, r.o, r.exe, r.bin, r.srv, r.prof, r.logf)
	if err != nil {
		r.fail("floor: %v", err)
	}
	r.res.Floor = fl
}

// runFloorScenario starts the floor server (the bench binary in its floor
// role) and compares it with the Baton server srv.
func runFloorScenario(ctx context.Context, o *options, exe, bin string, srv *batonsys.Server, prof *profiler, logf func(string, ...any)) (*floor.Result, error) {
	fp, err := proc.Start(exe, "-role", "floor")
	if err != nil {
		return nil, err
	}
	defer fp.Stop(5 * time.Second)
	lockAddr, bareAddr, err := twoAddrs(ctx, fp)
	if err != nil {
		return nil, fmt.Errorf("floor server: %w", err)
	}
	logf("floor: the floor lock server at %s, the bare server at %s (pid %d); Baton at %s (pid %d)", lockAddr, bareAddr, fp.PID(), srv.Addr, srv.PID())
	ft := floor.Target{Name: "floor", Addr: lockAddr, ClaimAddr: bareAddr, PID: fp.PID(), Everywhere: true, Profile: prof.target("floor", fp.PID(), exe)}
	bt := floor.Target{Name: "baton", Addr: srv.Addr, ClaimAddr: srv.Addr, PID: srv.PID(), Everywhere: srv.Everywhere, Profile: prof.target("baton", srv.PID(), bin)}
	cfg := floorSizes(o, exe)
	r, err := floor.Compare(ctx, cfg, ft, bt, logf)
	if err == nil && ctx.Err() == nil {
		r.RealNetwork = realNetwork(ctx, o, exe, bin, cfg.Workers, cfg.Contenders, logf)
	}
	r.Profiles = prof.tops(ctx)
	for _, row := range r.Rows() {
		logf("  %s: floor %s, baton %s, %.2f× %s", row.Figure, row.Floor, row.Baton, row.Ratio, row.Verdict())
	}
	return &r, err
}

// loadFloorBefore puts the floor comparison of the earlier run in the
// results.json at path beside this run's (-floor-before).
func loadFloorBefore(path string, res *report.Results) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var prev report.Results
	if err := json.Unmarshal(b, &prev); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if prev.Floor == nil {
		return fmt.Errorf("%s: no floor comparison in that run", path)
	}
	res.FloorBefore = prev.Floor
	res.FloorBeforeFrom = path
	return nil
}
