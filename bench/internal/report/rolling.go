package report

import (
	"fmt"
	"strings"

	"github.com/batonlock/baton/bench/internal/scenario"
)

// rollingTable is the rolling scenario's table: each step, then what the
// checks found over every grant.
func rollingTable(b *strings.Builder, r *scenario.RollingResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Replicated mode: a rolling restart under held claims\n\n")
	w("%d nodes; %d names each have a holder and %d waiters queued behind it in a known order (%d claims; the Go client, protocol version 3, every node's address, %s leases), all held through every step; %d more names change hands all along among %d clients each. "+
		"Each step stops one node (SIGTERM, or kill -9 for *crash*), starts it again with its data directory, and waits until it follows the leader (`/readyz?member`) and the cluster is healthy before the next. "+
		"Times run from the signal: *following* until the node's `/readyz?member` is 200 again, *healthy* until every node follows one leader whose grace is over, *claims back* until then the leader's `baton_claims_pending` is 0 (every claim of a planned handover's list back, or its time up; the next step waits for it), *first grant* and *longest gap* of the changing names (the longest time without any grant, from the signal until healthy), and the longest that *one* of them went without a grant. "+
		"*Longest move*: the longest time a holder's claim was between two nodes (from the move's start to the answer of its resume); *longest unconfirmed*: the longest time any of the %d holders went without a confirmed frame (its deadline is 0.8 × lease after that; a holder sends a heartbeat every lease / 4, so up to that and a round trip is the schedule, not a pause).\n\n",
		r.Nodes, r.Names, r.Waiters, r.Names*(1+r.Waiters), Dur(r.Lease), r.Probes, r.ProbeContenders, r.Names)
	w("| step | node | stopped | following | healthy | claims back | first grant | longest gap | one name's longest gap | holder moves | waiter moves | longest move | longest unconfirmed | holders lost | waiters' places lost | leader's resumes (refused, listed lost) |\n")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, st := range r.Steps {
		kind := map[string]string{scenario.StepFollower: "SIGTERM of a follower", scenario.StepLeader: "SIGTERM of the leader", scenario.StepCrash: "kill -9 of the leader (crash)"}[st.Kind]
		if kind == "" {
			kind = st.Kind
		}
		w("| %d. %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s | %s | %d | %d | %.0f (%.0f, %.0f) |\n", i+1, kind, st.Node, Dur(st.Stopped), Dur(st.Member), Dur(st.Healthy), Dur(st.ClaimsBack),
			Dur(st.FirstGrant), Dur(st.LongestGap), Dur(st.NameGap), st.HolderMoves, st.WaiterMoves, Dur(st.LongestMove), Dur(st.MostUnconfirmed), st.Lost, st.PlacesLost,
			st.Resumes, st.ResumesRefused, st.PendingLost)
	}
	w("\nThen the %d holders released at once and the waiters were granted in turn (each held %s): every waiter granted within %s. Over %d grants: **%d holders lost** (%d before their own deadline), %d waiters failed, %d waiters' places lost, **%d overlaps** (two clients believing in one name at once, each from its grant's receipt to its release's send or the loss's notice), **%d tokens not rising**, **%d names whose waiters were not granted in their queue order**.\n",
		r.Names, Dur(r.Hold), Dur(r.Drain), r.Grants, r.HoldersLost, r.LostEarly, r.WaitersFailed, r.PlacesLost, r.Overlaps, r.TokensFell, r.OutOfOrder)
	if r.NextGrant.N > 0 {
		w("\nFrom each holder's release to its first waiter's grant: p50 %s, p99 %s, max %s over %d names. %d moves ended after the last step (a waiter's move ends when its resume is answered; a waiter spreads its first attempt over up to lease / 8, and a name whose listed waiter is not back yet grants to nobody behind it).\n",
			Dur(r.NextGrant.P50), Dur(r.NextGrant.P99), Dur(r.NextGrant.Max), r.NextGrant.N, r.MovesAfter)
	}
	if r.ProbeErrors > 0 {
		w("\n%d acquires of the changing names failed (each retried).\n", r.ProbeErrors)
	}
	for _, p := range r.Problems {
		w("\n- %s", p)
	}
	if len(r.Problems) > 0 {
		w("\n")
	}
	w("\n")
}
