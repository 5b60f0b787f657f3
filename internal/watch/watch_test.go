package watch

import (
	"io"
	"strings"
	"testing"
)

// TestResyncCountsResumed: the resync that follows a change of leader
// says how many of the claims it lists were resumed.
func TestResyncCountsResumed(t *testing.T) {
	var stderr strings.Builder
	w := &watcher{out: Output{Stdout: io.Discard, Stderr: &stderr}}
	w.dispatch("", "resync", `{"reason":"another run","locks":[{"name":"jobs","holder":{"id":"12","resumed_from_epoch":3},"waiters":[{"id":"13","resumed_from_epoch":3},{"id":"14"}]}]}`)
	if !strings.Contains(stderr.String(), "1 locks are held or waited for now, 2 claims among them resumed") {
		t.Errorf("resync after a change of leader: %q, want the count of resumed claims", stderr.String())
	}
}
