package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/stats"
)

// semKey is one system at one hold, over its rounds.
type semKey struct {
	system string
	hold   time.Duration
}

// SemaphoreMarkdown renders the semaphore scenario: each system's figures
// at each hold (medians over the rounds), then Baton against each other
// system, round by round.
func SemaphoreMarkdown(r *Results) string {
	if len(r.Semaphore) == 0 {
		return ""
	}
	var (
		b     strings.Builder
		keys  []semKey
		runs  = map[semKey][]scenario.SemaphoreResult{}
		baton string
	)
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	for _, s := range r.Semaphore {
		k := semKey{s.System, s.Hold}
		if runs[k] == nil {
			keys = append(keys, k)
		}
		runs[k] = append(runs[k], s)
		if baton == "" && strings.HasPrefix(s.System, "baton") {
			baton = s.System
		}
	}
	slices.SortStableFunc(keys, func(a, b semKey) int {
		return cmp.Or(cmp.Compare(a.hold, b.hold), strings.Compare(a.system, b.system))
	})
	first := r.Semaphore[0]
	w("### Semaphore: %d slots, %d contenders\n\n", first.Limit, first.Contenders)
	w("Each contender takes one of the name's %d slots, holds it, gives it back and at once asks again, so every slot let go has a waiter. Handover: from a holder's release call to a waiter's return with the slot, both in the bench process, each grant paired with the earliest release not yet paired (slots go to the waiters in queue order). Slot changes/s: those grants a second, which follow the mean handover more than the p50. Server mean: Baton's own `baton_handover_latency_seconds` over the run (end of the holder's session to the push written), the server's share of the handover. Server CPU: the server process's CPU time over the window ÷ slot changes. Most holders: the most contenders that held a slot at once, from their return with it to their release call; the run fails if it passes the limit. Fairness: the most grants one contender got over the fewest, in the least fair round. Each other figure is the median over the rounds, the systems in turn in each round, the first one changing from round to round.\n\n", first.Limit)
	w("| system | hold | rounds | handover p50 | handover p99 | handover mean | server mean | slot changes/s | server CPU / slot change | most holders | fairness max/min | errors |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range keys {
		rs := runs[k]
		// Fairness is the least fair round's: rounds differ in length
		// of grants, so one round's fewest beside another's most says
		// nothing.
		worst, most, errs := rs[0], 0, 0
		for _, s := range rs {
			if unfairer(s, worst) {
				worst = s
			}
			most, errs = max(most, s.MostHolders), errs+s.Errors
		}
		w("| %s | %s | %d | %s | %s | %s | %s | %.0f | %s | %d | %s | %d |\n", k.system, holdText(k.hold), len(rs),
			medianDur(rs, func(s scenario.SemaphoreResult) time.Duration { return s.Handover.P50 }),
			medianDur(rs, func(s scenario.SemaphoreResult) time.Duration { return s.Handover.P99 }),
			medianDur(rs, func(s scenario.SemaphoreResult) time.Duration { return s.Handover.Mean }),
			medianDur(rs, func(s scenario.SemaphoreResult) time.Duration { return s.ServerMean }),
			medianOf(rs, func(s scenario.SemaphoreResult) float64 { return s.SlotChangesPerSec }),
			medianDur(rs, func(s scenario.SemaphoreResult) time.Duration { return s.ServerCPUPerChange }),
			most, Fairness(worst.GrantsMin, worst.GrantsMax), errs)
	}
	w("\n")
	if rows := semaphoreRatios(baton, keys, runs); rows != "" {
		w("Baton (%s) ÷ each other system, per round and the median of the rounds: below 1 for the handover and the CPU, above 1 for slot changes a second, is in Baton's favour.\n\n", baton)
		w("| hold | against | handover p50 | each round | slot changes/s | each round | server CPU / slot change | each round |\n")
		w("|---:|---|---:|---|---:|---|---:|---|\n")
		w("%s\n", rows)
	}
	return b.String()
}

// semaphoreRatios is a table row per hold and other system: Baton's
// figure ÷ the other's, in each round both ran, and their median.
func semaphoreRatios(baton string, keys []semKey, runs map[semKey][]scenario.SemaphoreResult) string {
	if baton == "" {
		return ""
	}
	var b strings.Builder
	for _, k := range keys {
		if k.system == baton {
			continue
		}
		ours := map[int]scenario.SemaphoreResult{}
		for _, s := range runs[semKey{baton, k.hold}] {
			ours[s.Round] = s
		}
		var lat, rate, cpu []float64
		for _, theirs := range runs[k] {
			o, ok := ours[theirs.Round]
			if !ok {
				continue
			}
			lat = append(lat, ratioOr0(float64(o.Handover.P50), float64(theirs.Handover.P50)))
			rate = append(rate, ratioOr0(o.SlotChangesPerSec, theirs.SlotChangesPerSec))
			cpu = append(cpu, ratioOr0(float64(o.ServerCPUPerChange), float64(theirs.ServerCPUPerChange)))
		}
		if len(lat) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", holdText(k.hold), k.system,
			times(stats.Median(lat)), eachRound(lat), times(stats.Median(rate)), eachRound(rate), times(stats.Median(cpu)), eachRound(cpu))
	}
	return b.String()
}

func medianOf(rs []scenario.SemaphoreResult, f func(scenario.SemaphoreResult) float64) float64 {
	xs := make([]float64, len(rs))
	for i, s := range rs {
		xs[i] = f(s)
	}
	return stats.Median(xs)
}

// unfairer reports whether a's most grants to one client over its fewest
// is larger than b's (none at all is the largest).
func unfairer(a, b scenario.SemaphoreResult) bool {
	if a.GrantsMin <= 0 || b.GrantsMin <= 0 {
		return a.GrantsMin <= 0 && b.GrantsMin > 0
	}
	return a.GrantsMax*b.GrantsMin > b.GrantsMax*a.GrantsMin
}

// medianDur is the median of f over rs, or "–" if none was measured.
func medianDur(rs []scenario.SemaphoreResult, f func(scenario.SemaphoreResult) time.Duration) string {
	m := medianOf(rs, func(s scenario.SemaphoreResult) float64 { return float64(f(s)) })
	if m <= 0 {
		return "–"
	}
	return Dur(time.Duration(m))
}

func ratioOr0(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// times renders a ratio, or "–" for none.
func times(x float64) string {
	if x <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

func eachRound(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = "–"
		if x > 0 {
			s[i] = fmt.Sprintf("%.2f", x)
		}
	}
	return strings.Join(s, " · ")
}

func holdText(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return Dur(d)
}
