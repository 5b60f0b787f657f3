package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/stats"
)

// goalRow is one row of the goals table.
type goalRow struct{ goal, target, figure, verdict string }

// A goal is one of the targets this run's figures are held to: rows reads
// the run and gives the goal's rows, none when the run did not measure
// what the goal needs.
type goal struct {
	rows func(r *Results) []goalRow
}

// goals are the rows of the goals table, in its order.
var goals = []goal{
	handoverGoal{"handover p50, back to back (8 waiters)", "≤ 1.5× loopback RTT (%s)", false, p50, 1.5}.goal(),
	handoverGoal{"handover p99, back to back (8 waiters)", "≤ 3× loopback RTT p50 (the RTT's own p99: %s)", false, p99, 3}.goal(),
	{closeNotifyContext},
	handoverGoal{"handover p50 after a 20 ms hold", "≤ 1.5× RTT after 20 ms idle (%s)", true, p50, 1.5}.goal(),
	handoverGoal{"handover p99 after a 20 ms hold", "≤ 3× RTT after 20 ms idle, p50 (its own p99: %s)", true, p99, 3}.goal(),
	{peerGoals},
	{memoryGoal},
	{heartbeatGoal},
	{detectGoals},
}

// Goals renders the goals against this run's figures: one row each, with
// the target, the figure, and met or short by how much.
func Goals(r *Results) string {
	var b strings.Builder
	b.WriteString("### Goals against this run\n\n| goal | target | this run | verdict |\n|---|---|---|---|\n")
	for _, g := range goals {
		for _, row := range g.rows(r) {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", row.goal, row.target, row.figure, row.verdict)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// verdict is "met" when got is at most limit, else by how much it is
// short.
func verdict(got, limit float64) string {
	if got <= limit {
		return "met"
	}
	return fmt.Sprintf("short: %.1f× the target", got/limit)
}

// quantile picks p50 or p99 of a summary.
type quantile func(stats.Summary) time.Duration

func p50(s stats.Summary) time.Duration { return s.P50 }
func p99(s stats.Summary) time.Duration { return s.P99 }

// A handoverGoal holds Baton's handover with 8 waiters, back to back or
// after a 20 ms hold, at quantile q to limit × the loopback round trip's
// p50 of the same kind (back to back or after 20 ms idle). target is the
// target column, a format given that round trip at q.
type handoverGoal struct {
	name, target string
	hold         bool
	q            quantile
	limit        float64
}

func (g handoverGoal) goal() goal {
	return goal{func(r *Results) []goalRow {
		h := findHandover(r, "baton", 8, g.hold)
		if r.Baseline == nil || h == nil {
			return nil
		}
		rtt := r.Baseline.RTT
		if g.hold {
			rtt = r.Baseline.RTTAfterIdle
		}
		got := float64(g.q(h.Latency)) / float64(rtt.P50)
		return []goalRow{{g.name, fmt.Sprintf(g.target, Dur(g.q(rtt))), fmt.Sprintf("%s = %.1f×", Dur(g.q(h.Latency)), got), verdict(got, g.limit)}}
	}}
}

// closeNotifyContext sets the back-to-back handover beside the floor of a
// close-based handover, for context.
func closeNotifyContext(r *Results) []goalRow {
	bl, h := r.Baseline, findHandover(r, "baton", 8, false)
	if bl == nil || h == nil || bl.CloseNotify.N == 0 {
		return nil
	}
	floor := float64(h.Latency.P50) / float64(bl.CloseNotify.P50)
	return []goalRow{{"(context) handover p50 against the close-notify floor", "–",
		fmt.Sprintf("%s = %.1f× the floor (%s = %.1f× RTT)", Dur(h.Latency.P50), floor, Dur(bl.CloseNotify.P50), float64(bl.CloseNotify.P50)/float64(bl.RTT.P50)), "–"}}
}

// peerGoals hold Baton's handover latency and rate above every peer's,
// with 8 and with 1,000 waiters.
func peerGoals(r *Results) []goalRow {
	peers := map[string]bool{}
	for _, h := range r.Handover {
		if !strings.HasPrefix(h.System, "baton") {
			peers[h.System] = true
		}
	}
	if len(peers) == 0 {
		return []goalRow{{"handover faster than every peer; handoffs/s above every peer", "–", "no peer in this run", "not measured"}}
	}
	var rows []goalRow
	for _, n := range []int{8, 1000} {
		bh := findHandover(r, "baton", n, false)
		if bh == nil {
			continue
		}
		var slower, fewer []string
		for p := range peers {
			ph := findHandover(r, p, n, false)
			if ph == nil {
				continue
			}
			if ph.Latency.P50 <= bh.Latency.P50 {
				slower = append(slower, fmt.Sprintf("%s %s", p, Dur(ph.Latency.P50)))
			}
			if ph.HandoffsPerSec >= bh.HandoffsPerSec {
				fewer = append(fewer, fmt.Sprintf("%s %.0f/s", p, ph.HandoffsPerSec))
			}
		}
		rows = append(rows,
			goalRow{fmt.Sprintf("handover p50 below every peer's (%d waiters)", n), "every peer", "baton " + Dur(bh.Latency.P50), unlessAny(slower, "as fast or faster")},
			goalRow{fmt.Sprintf("handoffs/s on one hot lock above every peer's (%d waiters)", n), "every peer", fmt.Sprintf("baton %.0f/s", bh.HandoffsPerSec), unlessAny(fewer, "as many or more")})
	}
	return rows
}

// unlessAny is "met" when no peer is listed in beat, else the peers and
// what they did.
func unlessAny(beat []string, what string) string {
	if len(beat) == 0 {
		return "met"
	}
	return "short: " + strings.Join(beat, ", ") + " " + what
}

// memoryGoal holds the server's memory per session, at the scale step
// the per-session figures come from, under 4 KiB.
func memoryGoal(r *Results) []goalRow {
	if len(r.Scale) == 0 {
		return nil
	}
	s := BestScale(r.Scale)
	return []goalRow{{"memory per session", "< 4 KiB", fmt.Sprintf("RSS %s, Go heap %s, stacks %s (%d sessions)", byteSize(s.RSSPerSession),
		byteSize(s.HeapPerSession), byteSize(s.StackPerSession), s.Live), verdict(s.RSSPerSession, 4096)}}
}

// heartbeatGoal holds the CPU that 100,000 sessions' heartbeats take,
// projected from the scale step, to 2 cores.
func heartbeatGoal(r *Results) []goalRow {
	if len(r.Scale) == 0 {
		return nil
	}
	s := BestScale(r.Scale)
	cores := s.ScheduledBeatsPerSession() * 1e5 * s.CPUPerHeartbeat.Seconds()
	return []goalRow{{"100,000 sessions with heartbeats on 2 cores", "≤ 2 cores",
		fmt.Sprintf("%.2f cores projected for the heartbeats alone (%s each)", cores, Dur(s.CPUPerHeartbeat)), verdict(cores, 2)}}
}

// detectGoals hold failure detection within 1 ms of the lease, for each
// lease measured.
func detectGoals(r *Results) []goalRow {
	late := func(d time.Duration) string {
		if d <= time.Millisecond {
			return "met"
		}
		return "short by " + Dur(d-time.Millisecond)
	}
	var rows []goalRow
	for _, d := range r.Detect {
		rows = append(rows, goalRow{"failure detection, lease " + Dur(d.Lease), "within 1 ms of the lease",
			fmt.Sprintf("error p50 %s, p99 %s", Dur(d.Error.P50), Dur(d.Error.P99)), fmt.Sprintf("p50 %s; p99 %s", late(d.Error.P50), late(d.Error.P99))})
	}
	return rows
}

// findHandover is the handover run of sys with waiters waiters, with or
// without a hold, or nil.
func findHandover(r *Results, sys string, waiters int, hold bool) *scenario.HandoverResult {
	for i := range r.Handover {
		h := &r.Handover[i]
		if h.System == sys && h.Waiters == waiters && (h.Hold > 0) == hold {
			return h
		}
	}
	return nil
}
