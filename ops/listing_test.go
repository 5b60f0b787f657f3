package ops_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// countingBackend records how many listings of the locks run at once.
type countingBackend struct {
	*fakeBackend
	now, most atomic.Int64
}

func (b *countingBackend) Locks() []server.LockView {
	n := b.now.Add(1)
	defer b.now.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	time.Sleep(5 * time.Millisecond) // a large table's listing takes a while
	return b.fakeBackend.Locks()
}

// TestListingsOneAtATime: tools polling GET /v1/locks at once are served
// one listing at a time, so that they hold one CPU at most, never every
// CPU the sessions need; each still gets its answer.
func TestListingsOneAtATime(t *testing.T) {
	b := &countingBackend{fakeBackend: newFake()}
	hs := httptest.NewServer(ops.NewHandler(ops.Config{Backend: b}))
	t.Cleanup(hs.Close)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				resp, err := http.Get(hs.URL + "/v1/locks")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("got %d, want 200", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	if m := b.most.Load(); m != 1 {
		t.Fatalf("%d listings ran at once, want 1", m)
	}
}
