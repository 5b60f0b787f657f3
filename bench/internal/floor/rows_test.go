package floor

import (
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
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", got)
	}
	if rows[2].Ratio != 0 || rows[2].Verdict() != "not met" {
		t.Errorf("a row never measured: %+v, want ratio 0 and not met", rows[2])
	}
}
