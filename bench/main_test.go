package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonlock/baton/bench/internal/report"
)

func TestMain(m *testing.M) {
	// The smoke test re-executes this test binary as the echo server and
	// the load generator, as the bench binary re-executes itself.
	for _, a := range os.Args[1:] {
		if a == "-role" {
			os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		}
	}
	goleak.VerifyTestMain(m)
}

// TestSmoke runs every scenario at smoke size against the real server and
// checks that each produced figures, tables and charts.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real server")
	}
	out := t.TempDir()
	var stdout, stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, []string{"-smoke", "-out", out, "-duration", "300ms", "-scale-sessions", "40"}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("bench -smoke exited %d; stderr:\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r report.Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if r.Baseline == nil || r.Baseline.RTT.N == 0 || r.Baseline.RTTAfterIdle.N == 0 || r.Baseline.ConnectClose.N == 0 {
		t.Errorf("baseline missing figures: %+v", r.Baseline)
	}
	if len(r.Handover) != 6 {
		t.Errorf("%d handover runs, want 6 (baton and baton-wire: two queue depths and one with a hold)", len(r.Handover))
	}
	for _, h := range r.Handover {
		if h.Latency.N == 0 || h.HandoffsPerSec <= 0 || h.GrantsMax == 0 {
			t.Errorf("handover run without figures: %+v", h)
		}
	}
	if len(r.Cycles) != 4 {
		t.Errorf("%d cycles runs, want 4", len(r.Cycles))
	}
	if len(r.Semaphore) != 2 {
		t.Errorf("%d semaphore runs, want 2 (baton-wire back to back and with a hold)", len(r.Semaphore))
	}
	for _, s := range r.Semaphore {
		if s.System != "baton-wire" || s.Handover.N == 0 || s.SlotChangesPerSec <= 0 || s.Errors != 0 || s.ServerCPUPerChange <= 0 || s.ServerMean <= 0 {
			t.Errorf("semaphore run without figures: %+v", s)
		}
		// A hold keeps every slot taken but for the handovers: the
		// clients see all 4 holders at once, and never a fifth.
		if s.Hold > 0 && s.MostHolders != 4 || s.MostHolders > 4 {
			t.Errorf("semaphore run with hold %v: at most %d holders at once, want 4", s.Hold, s.MostHolders)
		}
	}
	if len(r.Detect) != 1 || r.Detect[0].Error.N == 0 || r.Detect[0].Early != 0 {
		t.Errorf("detect: %+v, want samples and none early", r.Detect)
	}
	if len(r.Scale) != 1 || r.Scale[0].Opened != 40 || r.Scale[0].Live == 0 || r.Scale[0].HeartbeatsPerSec <= 0 {
		t.Errorf("scale: %+v, want 40 sessions opened and heartbeats counted", r.Scale)
	}
	if f := r.Floor; f == nil {
		t.Errorf("no floor comparison")
	} else {
		for _, row := range f.Rows() {
			if row.Ratio <= 0 {
				t.Errorf("floor row %q without a ratio: %+v", row.Figure, row)
			}
		}
		if len(f.Rounds) != 1 {
			t.Errorf("floor: %d rounds, want 1 in a smoke run", len(f.Rounds))
		}
		for _, rd := range f.Rounds {
			if rd.Floor.Heartbeat.Opened != 40 || rd.Baton.Heartbeat.Opened != 40 {
				t.Errorf("floor heartbeats: %d and %d sessions opened, want 40", rd.Floor.Heartbeat.Opened, rd.Baton.Heartbeat.Opened)
			}
		}
	}
	for _, f := range []string{"results.md", report.HandoverChart, report.ThroughputChart, report.MemoryChart, report.FloorChart} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %v)", f, err, st)
		}
	}
	if !strings.Contains(stdout.String(), "### The floor") {
		t.Errorf("stdout lacks the floor table:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "### Semaphore: 4 slots, 16 contenders") {
		t.Errorf("stdout lacks the semaphore table:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "### Handover") {
		t.Errorf("stdout lacks the handover table:\n%s", stdout.String())
	}
	checkClusterSmoke(t, &r, stdout.String())
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-duration", "-1s"},
		{"-scale-sessions", "1"},
		{"-scale-sessions", "ten"},
		{"-floor-sessions", "1"},
		{"-semaphore-rounds", "-1"},
		{"-dflockd", "/nonexistent/dflockd"},
		{"extra"},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), args, strings.NewReader(""), &strings.Builder{}, &stderr); code != 2 {
			t.Errorf("bench %v exited %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "bench") && !strings.Contains(stderr.String(), "flag") {
			t.Errorf("bench %v: no clear message, stderr %q", args, stderr.String())
		}
	}
}

// TestRoleArgs: the roles the floor scenario runs in a network namespace
// refuse to start without what they need, with a message.
func TestRoleArgs(t *testing.T) {
	for _, args := range [][]string{
		{"-role", "claims"},
		{"-role", "hotlock"},
		{"-role", "hotlock", "-addr", "127.0.0.1:1", "-duration", "1s"}, // no -server-pid
		{"-role", "hotlock", "-addr", "127.0.0.1:1", "-duration", "1s", "-server-pid", "1", "-workers", "1"},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), args, strings.NewReader(""), &strings.Builder{}, &stderr); code != 2 {
			t.Errorf("bench %v exited %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "need -addr") {
			t.Errorf("bench %v: stderr %q, want what it needs", args, stderr.String())
		}
	}
}

// TestRegistry: every scenario has a name of its own, which -scenario
// takes, and the scenarios that measure the shared server come before
// those that start servers of their own (the run stops it after the last
// of them).
func TestRegistry(t *testing.T) {
	seen := map[string]bool{"baseline": true}
	for i, s := range registry {
		if s.Name() == "" || seen[s.Name()] {
			t.Errorf("registry row %d: name %q empty or taken", i, s.Name())
		}
		seen[s.Name()] = true
		o, err := parseFlags([]string{"-scenario", s.Name()}, io.Discard)
		if err != nil || !o.scenarios[s.Name()] || !o.scenarios["baseline"] || len(o.scenarios) != 2 {
			t.Errorf("-scenario %s: %v, %v", s.Name(), o, err)
		}
		if uses, _ := s.UsesServer(); uses != (i <= lastUsingServer()) {
			t.Errorf("registry row %d (%s): uses the shared server %v, but row %d is the last that does", i, s.Name(), uses, lastUsingServer())
		}
	}
}
