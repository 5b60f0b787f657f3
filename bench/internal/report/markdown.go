package report

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/scenario"
	"github.com/batonlock/baton/bench/internal/stats"
)

// Dur renders a duration for tables: µs below 1 ms, ms below 1 s.
func Dur(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%s%.1f µs", neg, float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%s%.2f ms", neg, float64(d)/1e6)
	}
	return fmt.Sprintf("%s%.2f s", neg, d.Seconds())
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f×", stats.Ratio(a, b))
}

func byteSize(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.2f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// commitNote is the "(commit abc1234)" a Baton version carries.
var commitNote = regexp.MustCompile(`\s*\(commit [^)]*\)`)

// shownVersion is a system's version as the page gives it: Baton's
// without the commit it was built from.
func shownVersion(v string) string { return strings.TrimSpace(commitNote.ReplaceAllString(v, "")) }

// Fairness renders max/min grants per client.
func Fairness(minG, maxG int) string {
	if minG <= 0 {
		return fmt.Sprintf("∞ (%d/0)", maxG)
	}
	return fmt.Sprintf("%.2f (%d/%d)", float64(maxG)/float64(minG), maxG, minG)
}

// Markdown renders the tables of one run.
func Markdown(r *Results) string {
	var b strings.Builder
	for _, section := range []func(*Results) string{
		header, Goals, baselineTable, pollingTable, handoverTable, cyclesTable,
		SemaphoreMarkdown, FloorMarkdown, detectTable, scaleTables, ClusterMarkdown,
	} {
		b.WriteString(section(r))
	}
	return b.String()
}

// header says what the run measured and on what: the command, the
// machine, the systems' versions, and what was skipped or failed. The
// page describes what was measured, not when: the start, the load of the
// machine and the commit stay in results.json.
func header(r *Results) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	kind := "full sizes"
	if r.Smoke {
		kind = "smoke run (tiny sizes: the figures prove the scenarios run, not the speed)"
	}
	w("Results of `%s` — %s, %s of measuring.\n\n", r.Command, kind, r.Elapsed.Round(time.Second))
	w("Machine: %s, %d cores, %s memory, %s, %s, open-file hard limit %s.\n\n", r.Machine.CPU, r.Machine.Cores, r.Machine.Memory, r.Machine.Kernel, r.Machine.Go, r.Machine.NoFile)
	if len(r.Versions) > 0 {
		names := make([]string, 0, len(r.Versions))
		for n := range r.Versions {
			names = append(names, n)
		}
		sort.Strings(names)
		w("| system | version |\n|---|---|\n")
		for _, n := range names {
			w("| %s | %s |\n", n, shownVersion(r.Versions[n]))
		}
		w("\n")
	}
	for _, s := range r.Skipped {
		w("- skipped: %s\n", s)
	}
	for _, f := range r.Failures {
		w("- failed: %s\n", f)
	}
	if len(r.Skipped)+len(r.Failures) > 0 {
		w("\n")
	}
	return b.String()
}

// yardsticks are the baseline's p50s that the tables divide by: the
// back-to-back round trip, the round trip after 20 ms idle, and connect +
// echo + close; zero without a baseline.
func yardsticks(r *Results) (rtt, rttIdle, conn time.Duration) {
	if bl := r.Baseline; bl != nil {
		return bl.RTT.P50, bl.RTTAfterIdle.P50, bl.ConnectEchoClose.P50
	}
	return 0, 0, 0
}

func baselineTable(r *Results) string {
	bl := r.Baseline
	if bl == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	rtt, rttIdle, conn := yardsticks(r)
	w("### Baseline: this machine's loopback\n\n")
	w("| measure | n | p50 | p99 | max |\n|---|---:|---:|---:|---:|\n")
	row := func(name string, s stats.Summary) {
		w("| %s | %d | %s | %s | %s |\n", name, s.N, Dur(s.P50), Dur(s.P99), Dur(s.Max))
	}
	row("TCP round trip, 1-byte echo, back to back", bl.RTT)
	row("TCP round trip after 20 ms idle", bl.RTTAfterIdle)
	row("connect + close", bl.ConnectClose)
	row("connect + 1-byte echo + close", bl.ConnectEchoClose)
	if bl.CloseNotify.N > 0 {
		row("close-notify: close one connection, a bare server writes 1 byte to the next (the floor of a close-based handover)", bl.CloseNotify)
		row("close-notify after 20 ms idle", bl.CloseNotifyAfterIdle)
	}
	w("\nRatios below divide by the baseline's **p50**: handovers back to back by the back-to-back round trip (%s), handovers after a 20 ms hold by the after-idle round trip (%s), cycles by connect + echo + close (%s).\n\n", Dur(rtt), Dur(rttIdle), Dur(conn))
	return b.String()
}

func pollingTable(r *Results) string {
	p := r.Polling
	if p == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### Handover beside operators polling the locks (Baton)\n\n")
	w("%d waiters hand one lock over back to back while %d other sessions wait on another lock; in alternated windows nobody lists the locks, or %d loops poll `GET /v1/locks` without pause (%d listings, p50 %s each). Latency as in the handover table.\n\n",
		p.Waiters, p.Queue, p.Pollers, p.Listings, Dur(p.ListingP50))
	w("| listing the locks | n | p50 | p99 | max |\n|---|---:|---:|---:|---:|\n")
	w("| nobody | %d | %s | %s | %s |\n", p.Quiet.N, Dur(p.Quiet.P50), Dur(p.Quiet.P99), Dur(p.Quiet.Max))
	w("| %d loops | %d | %s | %s | %s |\n\n", p.Pollers, p.Polled.N, Dur(p.Polled.P50), Dur(p.Polled.P99), Dur(p.Polled.Max))
	return b.String()
}

func handoverTable(r *Results) string {
	if len(r.Handover) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	rtt, rttIdle, _ := yardsticks(r)
	w("### Handover: one lock, N waiters, every client re-queues at once\n\n")
	w("Latency: from the holder's Unlock call to the next holder's Lock return. Server mean: Baton's own `baton_handover_latency_seconds` over the run (end of the holder's session to the push written), the server's share of the latency.\n\n")
	w("| system | waiters | hold | n | p50 | p99 | max | p50 / RTT | p99 / RTT | handoffs/s | fairness max/min | errors | server mean |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, h := range r.Handover {
		base, hold := rtt, "none"
		if h.Hold > 0 {
			base, hold = rttIdle, Dur(h.Hold)
		}
		sm := "–"
		if h.ServerMean > 0 {
			sm = Dur(h.ServerMean)
		}
		w("| %s | %d | %s | %d | %s | %s | %s | %s | %s | %.0f | %s | %d | %s |\n", h.System, h.Waiters, hold, h.Latency.N,
			Dur(h.Latency.P50), Dur(h.Latency.P99), Dur(h.Latency.Max), ratio(h.Latency.P50, base), ratio(h.Latency.P99, base),
			h.HandoffsPerSec, Fairness(h.GrantsMin, h.GrantsMax), h.Errors, sm)
	}
	w("\n")
	return b.String()
}

func cyclesTable(r *Results) string {
	if len(r.Cycles) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	_, _, conn := yardsticks(r)
	w("### Uncontended cycles: each client acquires and releases its own lock\n\n")
	w("| system | clients | n | p50 | p99 | max | p50 / connect+echo+close | cycles/s | errors |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.Cycles {
		w("| %s | %d | %d | %s | %s | %s | %s | %.0f | %d |\n", c.System, c.Clients, c.Latency.N,
			Dur(c.Latency.P50), Dur(c.Latency.P99), Dur(c.Latency.Max), ratio(c.Latency.P50, conn), c.CyclesPerSec, c.Errors)
	}
	w("\n")
	return b.String()
}

func detectTable(r *Results) string {
	if len(r.Detect) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### Failure detection: a silent holder with lease L\n\n")
	w("Error: (waiter receives the ACQUIRED push) − (just before the holder writes its last frame) − L.\n\n")
	w("| system | lease | n | p50 error | p99 error | max error | early |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range r.Detect {
		w("| %s | %s | %d | %s | %s | %s | %d |\n", d.System, Dur(d.Lease), d.Error.N, Dur(d.Error.P50), Dur(d.Error.P99), Dur(d.Error.Max), d.Early)
	}
	w("\n")
	return b.String()
}

// scaleTables are the sessions-at-scale table and its projection.
func scaleTables(r *Results) string {
	if len(r.Scale) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	rtt, _, _ := yardsticks(r)
	w("### Sessions at scale (Baton)\n\n")
	w("Half holders, half waiters (one waiter per held lock); half the pairs with a %s lease, half with %s; each session heartbeats every lease/4 from a separate load-generator process. Memory per session = (under load − idle server) / live sessions, sampled at the start of the measuring window (live: the server's `baton_sessions` then, and at the window's end). CPU: the server's over the window, divided by the heartbeats it counted (`baton_heartbeats_total`); the load generator's CPU is given beside it, since both share the cores. Lost: sessions the server ended for a late heartbeat (LEASE_EXPIRED): a step that lost sessions before the sample overstates memory per live session (what the lost ones held is not all returned), so the projection and the goals use the largest step that lost none.\n\n", Dur(r.Scale[0].ShortLease), Dur(r.Scale[0].LongLease))
	w("| sessions | opened | live (start → end) | RSS / session | Go heap / session | stacks / session (goroutines) | heartbeats/s | server CPU / heartbeat | server CPU (cores) | load generator CPU (cores) | heartbeat RTT p50 / p99 | lost | handover p50 / p99 (×RTT) | after 20 ms hold p50 / p99 |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Scale {
		cores, genCores := 0.0, 0.0
		if s.Window > 0 {
			cores = float64(s.ServerCPU) / float64(s.Window)
			genCores = float64(s.LoadGenCPU) / float64(s.Window)
		}
		w("| %d | %d | %d → %d | %s | %s | %s (%.2f) | %.0f | %s | %.2f | %.2f | %s / %s | %d | %s / %s (%s / %s) | %s / %s |\n", s.Sessions, s.Opened, s.Live, s.LiveEnd,
			byteSize(s.RSSPerSession), byteSize(s.HeapPerSession), byteSize(s.StackPerSession), s.GoroutinesPerSession, s.HeartbeatsPerSec,
			Dur(s.CPUPerHeartbeat), cores, genCores, Dur(s.HeartbeatRTT.P50), Dur(s.HeartbeatRTT.P99), s.Lost,
			Dur(s.Handover.Latency.P50), Dur(s.Handover.Latency.P99), ratio(s.Handover.Latency.P50, rtt), ratio(s.Handover.Latency.P99, rtt),
			Dur(s.HandoverIdle.Latency.P50), Dur(s.HandoverIdle.Latency.P99))
	}
	w("\n")
	w("%s\n", Projection(r))
	return b.String()
}

// BestScale is the step the per-session figures are taken from: the
// largest whose sessions were all still held when memory was sampled (a
// lost session's memory is not all returned at once, so a step with losses
// overstates the cost of the live ones), else the largest.
func BestScale(steps []scenario.ScaleResult) scenario.ScaleResult {
	var best, clean scenario.ScaleResult
	for _, s := range steps {
		if s.Live > best.Live {
			best = s
		}
		if s.Live == s.Opened && s.Live > clean.Live {
			clean = s
		}
	}
	if clean.Live > 0 {
		return clean
	}
	return best
}

// Projection extrapolates the largest scale step to 100,000 and 1,000,000
// sessions, showing its arithmetic.
func Projection(r *Results) string {
	if len(r.Scale) == 0 {
		return ""
	}
	s := BestScale(r.Scale)
	var b strings.Builder
	beatsPerSession := s.ScheduledBeatsPerSession()
	fmt.Fprintf(&b, "Projection from the step with %d live sessions, linear: per-session figures × sessions; heartbeats on the schedule of this mix of leases, (4/%v + 4/%v) / 2 = %.3f per session per second, at the CPU per heartbeat measured:\n\n",
		s.Live, s.ShortLease, s.LongLease, beatsPerSession)
	fmt.Fprintf(&b, "| sessions | RSS | Go heap | heartbeats/s | server CPU for heartbeats |\n|---:|---:|---:|---:|---:|\n")
	for _, n := range []float64{1e5, 1e6} {
		beats := beatsPerSession * n
		cpu := beats * s.CPUPerHeartbeat.Seconds()
		fmt.Fprintf(&b, "| %.0f | %s × %.0f = %s | %s × %.0f = %s | %.2f × %.0f = %.0f | %.0f × %s = %.2f cores |\n", n,
			byteSize(s.RSSPerSession), n, byteSize(s.RSSPerSession*n), byteSize(s.HeapPerSession), n, byteSize(s.HeapPerSession*n),
			beatsPerSession, n, beats, beats, Dur(s.CPUPerHeartbeat), cpu)
	}
	return b.String()
}
