package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRaftLogJoinsSlog: Raft's hclog JSON lines come out of the node's
// slog handler with their level, message, attributes and component=raft;
// a line split across writes is kept whole.
func TestRaftLogJoinsSlog(t *testing.T) {
	var out bytes.Buffer
	l := newRaftLog(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Write([]byte(`{"@level":"warn","@message":"heartbeat timeout reached, starting election","@module":"raft","last-leader-id":"n1"}` + "\n" + `{"@level":"error","@mess`))
	l.Write([]byte(`age":"failed to persist vote","error":"disk"}` + "\n"))
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not one JSON format: %q", line)
		}
		recs = append(recs, m)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(recs), out.String())
	}
	if recs[0]["level"] != "WARN" || recs[0]["component"] != "raft" || recs[0]["last-leader-id"] != "n1" ||
		recs[0]["msg"] != "heartbeat timeout reached, starting election" {
		t.Errorf("first record %v", recs[0])
	}
	if recs[1]["level"] != "ERROR" || recs[1]["error"] != "disk" {
		t.Errorf("second record (split across writes) %v", recs[1])
	}
}

// TestRaftLogPeerFailuresSummed: a down peer's per-request errors (ten a
// second) are logged once, then summed up every 30 s while they go on; a
// failure after 30 s of quiet is news again. Other peers count apart.
func TestRaftLogPeerFailuresSummed(t *testing.T) {
	var out bytes.Buffer
	l := newRaftLog(slog.New(slog.NewTextHandler(&out, nil)))
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	fail := func(peer string) {
		fmt.Fprintf(l, `{"@level":"error","@message":"failed to heartbeat to","peer":"%s","error":"connection refused"}`+"\n", peer)
	}
	for range 601 { // a minute at ten a second
		fail("10.0.0.3:7072")
		now = now.Add(100 * time.Millisecond)
	}
	fail("10.0.0.2:7072")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines for 601 failures of one peer and one of another, want 4 (the first, two summaries, the other peer's):\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[1], "repeated=300") || !strings.Contains(lines[1], "for=30s") ||
		!strings.Contains(lines[2], "repeated=300") || !strings.Contains(lines[2], "for=1m0s") {
		t.Errorf("summary lines %q and %q, want repeated=300 for=30s, then for=1m0s", lines[1], lines[2])
	}
	for _, line := range lines {
		if !strings.Contains(line, "level=WARN") {
			t.Errorf("peer failure logged as %q, want WARN (the leader's health report says it in full)", line)
		}
	}
	out.Reset()
	now = now.Add(31 * time.Second)
	fail("10.0.0.3:7072")
	if !strings.Contains(out.String(), "failed to heartbeat to") || strings.Contains(out.String(), "repeated") {
		t.Errorf("after 30 s of quiet: %q, want the failure as news", out.String())
	}
}
