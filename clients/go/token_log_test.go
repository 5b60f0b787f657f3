package baton

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// syncBuffer is a bytes.Buffer for a logger written from the lock's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTokenLoggedExactly: a JSON log line carries the token as a decimal
// string, which every JSON reader keeps, at the top of the counter too
// (as a number, a reader of doubles would log 18446744073709551616).
func TestTokenLoggedExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c, pn := newPipeClient(t, []string{"pipe:1"}, WithLogger(log))
		const top = 1<<64 - 1
		l, _ := holdLock(t, c, pn, top)
		if l.Token() != top {
			t.Fatalf("Token() %d, want %d", l.Token(), uint64(top))
		}
		synctest.Wait() // a grant pushed is logged by the claim's goroutine after Acquire returns
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["msg"] == "baton: lock acquired" {
				if rec["token"] != "18446744073709551615" {
					t.Fatalf("acquired line %s: token %#v, want the string \"18446744073709551615\"", line, rec["token"])
				}
				return
			}
		}
		t.Fatalf("no \"baton: lock acquired\" line in %q", buf.String())
	})
}
