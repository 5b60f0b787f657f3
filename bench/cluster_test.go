package main

import (
	"context"
	"strings"
	"testing"

	"github.com/batonlock/baton/bench/internal/report"
	"github.com/batonlock/baton/bench/internal/scenario"
)

// checkClusterSmoke checks the replicated-mode figures of a smoke run:
// both systems measured in the comparison, and both kinds of fault
// injected, each ending with a new holder for every name and tokens that
// rose.
func checkClusterSmoke(t *testing.T, r *report.Results, md string) {
	t.Helper()
	c := r.Cluster
	if c == nil {
		t.Fatal("no cluster results")
	}
	for _, sys := range []string{"baton", "baton-cluster"} {
		for _, hold := range []bool{false, true} {
			found := false
			for _, run := range c.Runs {
				if run.System == sys && (run.Hold > 0) == hold {
					found = true
					if run.Latency.N == 0 || run.HandoffsPerSec <= 0 || run.ServerCPU <= 0 {
						t.Errorf("cluster comparison run without figures: %+v", run)
					}
					if sys == "baton-cluster" && run.FollowersCPU < 0 {
						t.Errorf("followers' CPU %v", run.FollowersCPU)
					}
				}
			}
			if !found {
				t.Errorf("cluster comparison: no run of %s (hold %v)", sys, hold)
			}
		}
	}
	f := c.Failover
	if f == nil {
		t.Fatal("no failover results")
	}
	for _, fr := range []scenario.FaultResult{f.Kill, f.Term} {
		if fr.FirstGrant.N != 2 || fr.Failed != 0 || fr.Backwards != 0 {
			t.Errorf("failover %s: %d faults measured (want 2), %d failed, %d tokens not rising: %+v", fr.Kind, fr.FirstGrant.N, fr.Failed, fr.Backwards, fr)
		}
	}
	// A kill -9 is followed by the grace (lease bound 1 s + 2 x 150 ms):
	// no new leader may grant before it.
	if f.Kill.FirstGrant.P50 < f.Lease {
		t.Errorf("first grant %v after a kill -9, inside the grace", f.Kill.FirstGrant.P50)
	}
	if f.Term.FirstGrant.P50 >= f.Kill.FirstGrant.P50 {
		t.Errorf("planned handover (%v) not faster than a kill -9 (%v)", f.Term.FirstGrant.P50, f.Kill.FirstGrant.P50)
	}
	for _, want := range []string{"### Replicated mode: a 3-node cluster's leader", "| hot-lock rate (handoffs/s), back to back |", "### Replicated mode: failover", "| kill -9 |", "| SIGTERM |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestClusterFlags(t *testing.T) {
	var stderr strings.Builder
	if code := run(context.Background(), []string{"-failovers", "-1"}, strings.NewReader(""), &strings.Builder{}, &stderr); code != 2 {
		t.Errorf("bench -failovers -1 exited %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "-failovers") {
		t.Errorf("no clear message: %q", stderr.String())
	}
	for _, c := range []struct {
		smoke bool
		want  int
	}{{false, 100}, {true, 2}} {
		args := []string{"-scenario", "failover"}
		if c.smoke {
			args = append(args, "-smoke")
		}
		o, err := parseFlags(args, &stderr)
		if err != nil || o.failovers != c.want || !o.scenarios["failover"] {
			t.Errorf("parseFlags(%v): %+v, %v; want %d failovers", args, o, err, c.want)
		}
	}
}
