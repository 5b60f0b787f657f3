package server_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// lockedBuffer is a log shared by the server's goroutines and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), sub)
}

// TestRefusalLogLimited: a flood of refused ACQUIREs writes a bounded
// number of WARN lines, while the metric counts every refusal; a line
// after the flood says how many were left out.
func TestRefusalLogLimited(t *testing.T) {
	var logs lockedBuffer
	acl := mustACL(t, `{"rules": [{"clients": ["*"], "locks": [""]}]}`)
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.ACL = acl
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	const refused = 150
	start := time.Now()
	for range refused {
		c := batontest.Dial(t, ts.Addr)
		c.Acquire("x", 10*time.Second, false, "")
		expectError(t, c, wire.CodeUnauthorized)
		c.Conn.Close()
	}
	secs := int(time.Since(start)/time.Second) + 1
	const line = "acquire refused by the access rules"
	if n, most := logs.count(line), 20+secs; n > most {
		t.Fatalf("%d refusals wrote %d WARN lines in %ds, want at most %d", refused, n, secs, most)
	}
	if got := unlabelled(t, ts, "baton_acl_refusals_total"); got != refused {
		t.Fatalf("baton_acl_refusals_total %v, want %d", got, refused)
	}
	time.Sleep(1100 * time.Millisecond) // the limit lets one more through
	c := batontest.Dial(t, ts.Addr)
	c.Acquire("x", 10*time.Second, false, "")
	expectError(t, c, wire.CodeUnauthorized)
	if logs.count("suppressed=") == 0 {
		t.Fatalf("no line says how many refusals were not logged")
	}
}

// unlabelled is the value of the unlabelled counter name.
func unlabelled(t *testing.T, ts *batontest.Server, name string) float64 {
	t.Helper()
	mfs, err := ts.Srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s", name)
	return 0
}
