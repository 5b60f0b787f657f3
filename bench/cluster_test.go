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

// checkRollingSmoke checks the rolling scenario of a smoke run: every
// step measured, every claim kept through the planned steps, and the
// checks over every grant clean.
func checkRollingSmoke(t *testing.T, r *report.Results, md string) {
	t.Helper()
	if r.Cluster == nil || r.Cluster.Rolling == nil {
		t.Fatal("no rolling results")
	}
	rr := r.Cluster.Rolling
	if len(rr.Steps) != 3 {
		t.Fatalf("rolling: %d steps, want 3 (two followers, then the leader): %+v", len(rr.Steps), rr.Steps)
	}
	for i, st := range rr.Steps {
		if st.Member <= 0 || st.Healthy < st.Member || st.ClaimsBack < st.Healthy || st.FirstGrant <= 0 {
			t.Errorf("rolling step %d without its times: %+v", i+1, st)
		}
		if st.Lost != 0 || st.PlacesLost != 0 {
			t.Errorf("rolling step %d (%s): %d holders and %d waiters' places lost", i+1, st.Kind, st.Lost, st.PlacesLost)
		}
	}
	// SIGTERM of the leader: every holder of a held name moves.
	if st := rr.Steps[2]; st.Kind != scenario.StepLeader || st.HolderMoves < rr.Names || st.Resumes < float64(rr.Names) {
		t.Errorf("the leader's step: %d holder moves and %v resumes, want at least %d: %+v", st.HolderMoves, st.Resumes, rr.Names, st)
	}
	if want := rr.Names * (1 + rr.Waiters); rr.Grants < want || rr.HoldersLost != 0 || rr.Overlaps != 0 || rr.TokensFell != 0 || rr.OutOfOrder != 0 || rr.WaitersFailed != 0 {
		t.Errorf("rolling: %d grants (want %d or more), %d lost, %d overlaps, %d tokens not rising, %d out of order, %d failed: %v",
			rr.Grants, want, rr.HoldersLost, rr.Overlaps, rr.TokensFell, rr.OutOfOrder, rr.WaitersFailed, rr.Problems)
	}
	if !strings.Contains(md, "### Replicated mode: a rolling restart under held claims") || !strings.Contains(md, "| 3. SIGTERM of the leader |") {
		t.Errorf("markdown lacks the rolling table")
	}
}
