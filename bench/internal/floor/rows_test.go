package floor

import (
	"net"
	"testing"
	"time"
)

// TestRowsMedians: each row is the median over the rounds, its ratio the
// median of the rounds' ratios, judged against the target.
func TestRowsMedians(t *testing.T) {
	round := func(floorCPU, batonCPU time.Duration, floorRate, batonRate float64) Round {
		var r Round
		r.Floor.HotLock.CPUPerGrant, r.Baton.HotLock.CPUPerGrant = floorCPU, batonCPU
		r.Floor.HotLock.ChangesPerSec, r.Baton.HotLock.ChangesPerSec = floorRate, batonRate
		return r
	}
	res := Result{Contenders: 8, Idle: Idle, Rounds: []Round{
		round(40*time.Microsecond, 60*time.Microsecond, 1000, 900),  // 1.5, 0.9
		round(50*time.Microsecond, 45*time.Microsecond, 1000, 1200), // 0.9, 1.2
		round(40*time.Microsecond, 38*time.Microsecond, 2000, 2000), // 0.95, 1.0
	}}
	rows := res.Rows()
	cpu, rate := rows[0], rows[1]
	if cpu.Key != "hot-cpu" || rate.Key != "hot-rate" {
		t.Fatalf("rows in the wrong order: %q, %q", cpu.Key, rate.Key)
	}
	if cpu.Ratio != 0.95 || len(cpu.Ratios) != 3 || cpu.Floor != "40.0 µs" || cpu.Baton != "45.0 µs" {
		t.Errorf("CPU row %+v, want ratio 0.95 (median of 1.5, 0.9, 0.95), floor 40.0 µs, Baton 45.0 µs", cpu)
	}
	if cpu.Verdict() != "met" {
		t.Errorf("CPU row verdict %q at %.2f× against %.2f×", cpu.Verdict(), cpu.Ratio, cpu.Target)
	}
	if rate.Ratio != 1.0 || !rate.HigherBetter || rate.Verdict() != "–" {
		t.Errorf("rate row %+v, want ratio 1.0, higher better, no target", rate)
	}
	if !cpu.Measured || rows[2].Measured {
		t.Errorf("measured: CPU row %v, a row never measured %v; want true, false", cpu.Measured, rows[2].Measured)
	}
	if rows[2].Ratio != 0 || rows[2].Verdict() != "not met" {
		t.Errorf("a row never measured: %+v, want ratio 0 and not met", rows[2])
	}
}

// TestSelfRows: the RST rows are Baton's reset release ÷ its normal close
// within each round, their median judged against a minimum; the floor's
// figures play no part, and a run without the Go client's figures (an
// earlier results.json) gives no ratio rather than a wrong one.
func TestSelfRows(t *testing.T) {
	round := func(claims, claimsRST, hot, hotRST float64) Round {
		var r Round
		r.Floor.Claims.PerSec, r.Floor.ClaimsRST.PerSec = 1, 1000 // never divides
		r.Baton.Claims.Workers = 16
		r.Baton.GoClient = &GoClient{}
		g := r.Baton.GoClient
		g.Claims.PerSec, g.ClaimsRST.PerSec = claims, claimsRST
		g.HotLock.ChangesPerSec, g.HotLockRST.ChangesPerSec = hot, hotRST
		r.Baton.Claims.PerSec, r.Baton.ClaimsRST.PerSec = claims/2, claimsRST/2
		r.Baton.HotLock.ChangesPerSec, r.Baton.HotLockRST.ChangesPerSec = hot, hot
		return r
	}
	res := Result{Contenders: 8, Idle: Idle, Rounds: []Round{
		round(10000, 25000, 4000, 4400), // 2.5, 1.1
		round(12000, 18000, 4000, 5000), // 1.5, 1.25
		round(10000, 21000, 5000, 6000), // 2.1, 1.2
	}}
	byKey := map[string]Row{}
	for _, row := range res.Rows() {
		byKey[row.Key] = row
	}
	claims, hot := byKey["self-claims-go"], byKey["self-hot-go"]
	if !claims.Self || claims.Floor != "–" || claims.Baton != "21000 / 10000" {
		t.Errorf("claims row %+v, want Baton's medians, RST / normal close: 21000 / 10000", claims)
	}
	if claims.Ratio != 2.1 || claims.Target != TargetClaimsRST || claims.Verdict() != "met" {
		t.Errorf("claims row: ratio %.2f (each %v), verdict %q; want 2.10 (median of 2.5, 1.5, 2.1), met at ≥ 2", claims.Ratio, claims.Ratios, claims.Verdict())
	}
	if hot.Ratio != 1.2 || len(hot.Ratios) != 3 || hot.Verdict() != "met" || hot.Baton != "5000 / 4000" {
		t.Errorf("hot-lock row %+v, want ratio 1.20 (median of 1.1, 1.25, 1.2), met at ≥ 1.15", hot)
	}
	if w := byKey["self-claims-wire"]; w.Ratio != 2.1 || w.Target != 0 || w.Verdict() != "–" {
		t.Errorf("raw-wire claims row %+v, want ratio 2.10 and no target", w)
	}
	if w := byKey["self-hot-wire"]; w.Ratio != 1.0 {
		t.Errorf("raw-wire hot-lock row %+v, want ratio 1.00", w)
	}

	// Below the minimum: not met, even though lower is not better here.
	res.Rounds = []Round{round(10000, 19000, 4000, 4400)}
	for _, row := range res.Rows() {
		if row.Key == "self-claims-go" && (row.Ratio != 1.9 || row.Verdict() != "not met") {
			t.Errorf("claims row at 1.9×: %+v, verdict %q, want not met", row, row.Verdict())
		}
	}

	// An earlier run, without the Go client: ratio 0, not met, no panic.
	old := round(10000, 25000, 4000, 4400)
	old.Baton.GoClient = nil
	res.Rounds = []Round{old}
	for _, row := range res.Rows() {
		if row.Key == "self-hot-go" && (row.Ratio != 0 || row.Verdict() != "not met") {
			t.Errorf("row of a run without the Go client: %+v", row)
		}
	}
}

// TestFresh: each run gets a loopback address not handed out before, on
// the server's port; a server on 127.0.0.1 alone is dialed there.
func TestFresh(t *testing.T) {
	var f Fresh
	every := Target{Everywhere: true}
	seen := map[string]bool{}
	for range 600 {
		a := f.Addr(every, "127.0.0.1:7070")
		host, port, err := net.SplitHostPort(a)
		ip := net.ParseIP(host)
		if err != nil || port != "7070" || ip == nil || !ip.IsLoopback() || seen[host] {
			t.Fatalf("address %q: want a new loopback host on port 7070 (%v)", a, err)
		}
		if last := ip.To4()[3]; last == 0 || last == 255 {
			t.Fatalf("address %q ends in %d", a, last)
		}
		seen[host] = true
	}
	if a := f.Addr(Target{}, "127.0.0.1:7070"); a != "127.0.0.1:7070" {
		t.Errorf("a server on 127.0.0.1 only is dialed at %q", a)
	}
}

// TestReleasesOrder: the reset runs first in odd rounds (the first, the
// third...), the normal close first in even ones, and both run.
func TestReleasesOrder(t *testing.T) {
	for round, want := range [][]bool{{true, false}, {false, true}, {true, false}} {
		var got []bool
		if err := releases(round, func(rst bool) error { got = append(got, rst); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("round %d (from 0): ran %v, want %v", round, got, want)
		}
	}
}

// TestRealNetworkRows: the tcp_tw_reuse=0 pairs give one row each, RST ÷
// normal close of their one run; the hot lock's is judged against issue
// 16's hot-lock target (the claims' has none), and neither row appears
// for a pair that was skipped or, in an earlier results.json, never run.
func TestRealNetworkRows(t *testing.T) {
	res := Result{Contenders: 8, Idle: Idle, Rounds: []Round{{}}}
	rn := &RealNetwork{Window: 20 * time.Second, Contenders: 8, HotLockWindow: 10 * time.Second}
	rn.Claims.Workers, rn.Claims.PerSec, rn.ClaimsRST.PerSec = 16, 1500, 9000
	rn.HotLock.ChangesPerSec, rn.HotLockRST.ChangesPerSec = 2900, 5800
	res.RealNetwork = rn
	rows := func() map[string]Row {
		m := map[string]Row{}
		for _, row := range res.Rows() {
			m[row.Key] = row
		}
		return m
	}

	m := rows()
	claims, hot := m["self-claims-go-netns"], m["self-hot-go-netns"]
	if claims.Ratio != 6 || claims.Baton != "9000 / 1500" || claims.Target != 0 || !claims.Measured {
		t.Errorf("claims row %+v, want 6.00× (9000 / 1500), no target", claims)
	}
	if hot.Ratio != 2 || hot.Baton != "5800 / 2900" || len(hot.Ratios) != 1 || !hot.Self || !hot.Measured {
		t.Errorf("hot-lock row %+v, want 2.00× (5800 / 2900), one run", hot)
	}
	if hot.Target != TargetHotLockRST || !hot.AtLeast || hot.Verdict() != "met" {
		t.Errorf("hot-lock row: target %.2f (at least %v), verdict %q; want ≥ %.2f, met", hot.Target, hot.AtLeast, hot.Verdict(), TargetHotLockRST)
	}
	if want := "Baton, hot lock owner changes/s, 8 contenders, the Go client, in a network namespace with tcp_tw_reuse=0 (as between two hosts), 10.00 s each, once per run: RST release ÷ normal close"; hot.Figure != want {
		t.Errorf("hot-lock row figure %q, want %q", hot.Figure, want)
	}
	if _, ok := m["self-hot-go"]; !ok {
		t.Errorf("the loopback Go-client hot-lock row is gone beside the namespace's")
	}

	rn.HotLockRST.ChangesPerSec = 3190 // 1.10×
	if hot := rows()["self-hot-go-netns"]; hot.Verdict() != "not met" {
		t.Errorf("hot-lock row at %.2f×: verdict %q, want not met", hot.Ratio, hot.Verdict())
	}
	// The normal close measured nothing: no ratio, not met, no panic.
	rn.HotLock.ChangesPerSec = 0
	if hot := rows()["self-hot-go-netns"]; hot.Ratio != 0 || hot.Verdict() != "not met" {
		t.Errorf("hot-lock row without a normal close: %+v", hot)
	}

	rn.HotLockSkipped = "normal close: boom"
	if _, ok := rows()["self-hot-go-netns"]; ok {
		t.Errorf("a hot-lock row for a skipped hot-lock pair")
	}
	if _, ok := rows()["self-claims-go-netns"]; !ok {
		t.Errorf("the claims row went with the hot lock's skip")
	}
	rn.HotLockSkipped, rn.HotLock, rn.HotLockRST = "", HotLock{}, HotLock{} // a run from before the hot-lock pair
	if _, ok := rows()["self-hot-go-netns"]; ok {
		t.Errorf("a hot-lock row for a run without the hot-lock pair")
	}
	rn.Skipped = "not root"
	m = rows()
	if _, ok := m["self-claims-go-netns"]; ok {
		t.Errorf("a claims row for a skipped real-network part")
	}
	if _, ok := m["self-hot-go-netns"]; ok {
		t.Errorf("a hot-lock row for a skipped real-network part")
	}
}
