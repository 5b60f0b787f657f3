package opsview

import (
	"strings"
	"testing"

	"github.com/batonlock/baton/internal/hidden"
	"github.com/batonlock/baton/internal/opsclient"
)

// TestPrintLocksShowsNoHiddenRunes: baton locks' table, fed an answer
// whose names and owners carry a right-to-left override and C1 controls,
// prints none of them raw.
func TestPrintLocksShowsNoHiddenRunes(t *testing.T) {
	tok := uint64(7)
	limit := 3
	locks := []opsclient.Lock{{
		Name:  "bidi\u202eX",
		Limit: &limit,
		Holders: []opsclient.Session{
			{ID: "1", Owner: "evil\u202egpj.exe", Token: &tok, Shared: true},
			{ID: "2", Owner: "c1\u009b31m", Token: &tok, Shared: true},
		},
		Waiters: []opsclient.Session{{ID: "3", Owner: "w\u2067aiter"}},
	}}
	var b strings.Builder
	Lock(&b, locks[0])
	out := b.String()
	if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && hidden.Rune(r) }); i >= 0 {
		t.Fatalf("baton locks printed a hidden rune raw at byte %d:\n%q", i, out)
	}
	for _, want := range []string{`bidi\u202EX`, `evil\u202Egpj.exe`, `c1\u009B31m`, `w\u2067aiter`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}

// TestResumedShown: a claim of protocol version 3 that came back on a new
// connection says so, with the epoch its token came from: baton watch's
// resumed line (and the session it replaces), baton locks NAME's holder
// line.
func TestResumedShown(t *testing.T) {
	tok := uint64(3<<40 | 7)
	s := opsclient.Session{ID: "12", Remote: "10.0.0.5:4000", Owner: "ci", LeaseMS: 10000, Token: &tok, ResumedFromEpoch: 3}
	line := Event(opsclient.Event{Type: "resumed", Lock: "jobs", Session: s, Replaces: "9"})
	for _, want := range []string{"resumed", "token=3298534883335", "from_epoch=3", "replaces=9"} {
		if !strings.Contains(line, want) {
			t.Errorf("watch line %q lacks %q", line, want)
		}
	}
	var b strings.Builder
	Lock(&b, opsclient.Lock{Name: "jobs", Holder: &s})
	if !strings.Contains(b.String(), "resumed from epoch 3") {
		t.Errorf("baton locks jobs:\n%s\nwant \"resumed from epoch 3\" on the holder's line", b.String())
	}
}

// TestClusterWarnsUnresumable: baton cluster warns when the leader gives
// no credentials (claims made now end at the next change of leader), and
// prints the usual view, without the line, when it does.
func TestClusterWarnsUnresumable(t *testing.T) {
	const warning = "claims made now do NOT survive a change of leader"
	for _, resumable := range []bool{false, true} {
		v := opsclient.Cluster{NodeID: "n1", Role: "leader", Resumable: &resumable}
		var b strings.Builder
		Cluster(&b, v, v)
		if got := strings.Contains(b.String(), warning); got == resumable {
			t.Errorf("resumable %v: warning shown %v:\n%s", resumable, got, b.String())
		}
	}
}
