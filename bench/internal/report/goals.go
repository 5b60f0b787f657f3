package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/scenario"
)

// Goals renders the goals against this run's figures: one row
// each, with the target, the figure, and met or short by how much.
func Goals(r *Results) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### Goals against this run\n\n| goal | target | this run | verdict |\n|---|---|---|---|\n")
	verdict := func(got, limit float64) string {
		if got <= limit {
			return "met"
		}
		return fmt.Sprintf("short: %.1f× the target", got/limit)
	}
	find := func(sys string, waiters int, hold bool) *scenario.HandoverResult {
		for i := range r.Handover {
			h := &r.Handover[i]
			if h.System == sys && h.Waiters == waiters && (h.Hold > 0) == hold {
				return h
			}
		}
		return nil
	}
	if bl := r.Baseline; bl != nil {
		if h := find("baton", 8, false); h != nil {
			p50 := float64(h.Latency.P50) / float64(bl.RTT.P50)
			p99 := float64(h.Latency.P99) / float64(bl.RTT.P50)
			w("| handover p50, back to back (8 waiters) | ≤ 1.5× loopback RTT (%s) | %s = %.1f× | %s |\n", Dur(bl.RTT.P50), Dur(h.Latency.P50), p50, verdict(p50, 1.5))
			w("| handover p99, back to back (8 waiters) | ≤ 3× loopback RTT p50 (the RTT's own p99: %s) | %s = %.1f× | %s |\n", Dur(bl.RTT.P99), Dur(h.Latency.P99), p99, verdict(p99, 3))
			if bl.CloseNotify.N > 0 {
				floor := float64(h.Latency.P50) / float64(bl.CloseNotify.P50)
				w("| (context) handover p50 against the close-notify floor | – | %s = %.1f× the floor (%s = %.1f× RTT) | – |\n",
					Dur(h.Latency.P50), floor, Dur(bl.CloseNotify.P50), float64(bl.CloseNotify.P50)/float64(bl.RTT.P50))
			}
		}
		if h := find("baton", 8, true); h != nil {
			p50 := float64(h.Latency.P50) / float64(bl.RTTAfterIdle.P50)
			p99 := float64(h.Latency.P99) / float64(bl.RTTAfterIdle.P50)
			w("| handover p50 after a 20 ms hold | ≤ 1.5× RTT after 20 ms idle (%s) | %s = %.1f× | %s |\n", Dur(bl.RTTAfterIdle.P50), Dur(h.Latency.P50), p50, verdict(p50, 1.5))
			w("| handover p99 after a 20 ms hold | ≤ 3× RTT after 20 ms idle, p50 (its own p99: %s) | %s = %.1f× | %s |\n", Dur(bl.RTTAfterIdle.P99), Dur(h.Latency.P99), p99, verdict(p99, 3))
		}
	}
	peers := map[string]bool{}
	for _, h := range r.Handover {
		if !strings.HasPrefix(h.System, "baton") {
			peers[h.System] = true
		}
	}
	if len(peers) == 0 {
		w("| handover faster than every peer; handoffs/s above every peer | – | no peer in this run | not measured |\n")
	} else {
		for _, n := range []int{8, 1000} {
			bh := find("baton", n, false)
			if bh == nil {
				continue
			}
			var slower, fewer []string
			for p := range peers {
				ph := find(p, n, false)
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
			v := "met"
			if len(slower) > 0 {
				v = "short: " + strings.Join(slower, ", ") + " as fast or faster"
			}
			w("| handover p50 below every peer's (%d waiters) | every peer | baton %s | %s |\n", n, Dur(bh.Latency.P50), v)
			v = "met"
			if len(fewer) > 0 {
				v = "short: " + strings.Join(fewer, ", ") + " as many or more"
			}
			w("| handoffs/s on one hot lock above every peer's (%d waiters) | every peer | baton %.0f/s | %s |\n", n, bh.HandoffsPerSec, v)
		}
	}
	if len(r.Scale) > 0 {
		s := BestScale(r.Scale)
		w("| memory per session | < 4 KiB | RSS %s, Go heap %s, stacks %s (%d sessions) | %s |\n", byteSize(s.RSSPerSession),
			byteSize(s.HeapPerSession), byteSize(s.StackPerSession), s.Live, verdict(s.RSSPerSession, 4096))
		cores := s.ScheduledBeatsPerSession() * 1e5 * s.CPUPerHeartbeat.Seconds()
		w("| 100,000 sessions with heartbeats on 2 cores | ≤ 2 cores | %.2f cores projected for the heartbeats alone (%s each) | %s |\n",
			cores, Dur(s.CPUPerHeartbeat), verdict(cores, 2))
	}
	late := func(d time.Duration) string {
		if d <= time.Millisecond {
			return "met"
		}
		return "short by " + Dur(d-time.Millisecond)
	}
	for _, d := range r.Detect {
		w("| failure detection, lease %s | within 1 ms of the lease | error p50 %s, p99 %s | p50 %s; p99 %s |\n", Dur(d.Lease),
			Dur(d.Error.P50), Dur(d.Error.P99), late(d.Error.P50), late(d.Error.P99))
	}
	w("\n")
	return b.String()
}
