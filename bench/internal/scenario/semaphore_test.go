package scenario

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonlock/baton/bench/internal/system"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSemaphore is a FIFO semaphore in this process. It keeps slots
// slots whatever limit its clients ask for, and grants a waiter a slot
// delay after the release that frees it. The n-th slot taken free (from
// 0) is handed over n × stagger late, so that the slots do not all
// change hands at the same moments.
type fakeSemaphore struct {
	slots   int
	delay   time.Duration
	stagger time.Duration

	mu      sync.Mutex
	held    int
	free    int // slots taken free so far
	waiting []chan struct{}
}

func (f *fakeSemaphore) Name() string                            { return "fake" }
func (f *fakeSemaphore) Version(context.Context) (string, error) { return "test", nil }
func (f *fakeSemaphore) Close() error                            { return nil }
func (f *fakeSemaphore) NewSlotClient(context.Context, int, int) (system.Client, error) {
	return fakeSlotClient{f}, nil
}

type fakeSlotClient struct{ f *fakeSemaphore }

func (c fakeSlotClient) Lock(ctx context.Context, _ string) error {
	f := c.f
	f.mu.Lock()
	if f.held < f.slots && len(f.waiting) == 0 {
		f.held++
		late := time.Duration(f.free) * f.stagger
		f.free++
		f.mu.Unlock()
		time.Sleep(late)
		return nil
	}
	granted := make(chan struct{})
	f.waiting = append(f.waiting, granted)
	f.mu.Unlock()
	select {
	case <-granted:
		return nil
	case <-ctx.Done():
	}
	f.mu.Lock()
	if i := slices.Index(f.waiting, granted); i >= 0 {
		f.waiting = slices.Delete(f.waiting, i, i+1)
		f.mu.Unlock()
		return ctx.Err()
	}
	f.mu.Unlock()
	<-granted // on its way: take it and give it back
	c.Unlock(ctx, "")
	return ctx.Err()
}

func (c fakeSlotClient) Unlock(context.Context, string) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiting) == 0 {
		f.held--
		return nil
	}
	next := f.waiting[0]
	f.waiting = f.waiting[1:]
	time.AfterFunc(f.delay, func() { close(next) })
	return nil
}

func (c fakeSlotClient) Close() error { return nil }

// TestSemaphoreMeasuresHandover: against a semaphore that grants each
// waiter exactly 20 ms after the release that frees its slot, every
// handover is paired with its own release: the p50 is 20 ms and a little
// (a grant paired with a later release would show less, with an earlier
// one much more); the clients saw the limit's
// holders at once and no more.
func TestSemaphoreMeasuresHandover(t *testing.T) {
	const delay = 20 * time.Millisecond
	// Each slot is held 20 ms and handed over in 20 ms; the slots start
	// 3 ms apart, so when one is granted the other three have been let
	// go too, later: a grant paired with the latest release would show
	// 11 ms.
	f := &fakeSemaphore{slots: 4, delay: delay, stagger: 3 * time.Millisecond}
	res, err := Semaphore(t.Context(), f, SemaphoreConfig{Limit: 4, Contenders: 16, Hold: 20 * time.Millisecond, Duration: 500 * time.Millisecond, Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Handover.N < 20 {
		t.Fatalf("%d handovers in 500ms, want at least 20 (4 slots changing every ~40ms)", res.Handover.N)
	}
	// Timers fire late on a loaded machine, never early; the upper bound
	// leaves room for that, and is far below a grant paired with the
	// release before its own (a whole hold and handover earlier).
	if res.Handover.P50 < delay || res.Handover.P50 > delay+15*time.Millisecond {
		t.Errorf("handover p50 %v, want %v to %v", res.Handover.P50, delay, delay+15*time.Millisecond)
	}
	if res.MostHolders != 4 {
		t.Errorf("most holders at once %d, want the limit, 4", res.MostHolders)
	}
	if res.SlotChangesPerSec <= 0 || res.GrantsMin <= 0 || res.Errors != 0 {
		t.Errorf("result %+v, want slot changes, a grant for every client and no errors", res)
	}
}

// TestSemaphoreRefusesOverGrant: a server that lets a fifth holder in on
// a limit of 4 fails the run, naming what it saw.
func TestSemaphoreRefusesOverGrant(t *testing.T) {
	f := &fakeSemaphore{slots: 5, delay: time.Millisecond}
	res, err := Semaphore(t.Context(), f, SemaphoreConfig{Limit: 4, Contenders: 16, Hold: 5 * time.Millisecond, Duration: 300 * time.Millisecond, Name: "s"})
	if err == nil || !strings.Contains(err.Error(), "5 clients held a slot at once, limit 4") {
		t.Fatalf("error %v (result %+v), want the fifth holder named", err, res)
	}
}

// TestSemaphoreConfig: a run that could not contend is refused.
func TestSemaphoreConfig(t *testing.T) {
	for _, cfg := range []SemaphoreConfig{{Limit: 0, Contenders: 4}, {Limit: 4, Contenders: 4}} {
		if _, err := Semaphore(t.Context(), &fakeSemaphore{slots: 4}, cfg); err == nil || !strings.Contains(err.Error(), "contenders") {
			t.Errorf("%+v: error %v, want the sizes refused", cfg, err)
		}
	}
}

// TestReleaseLine: the first limit grants pair with nothing; every later
// grant with the earliest release not yet paired.
func TestReleaseLine(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	l := newReleaseLine(2)
	type step struct {
		release bool
		at      int
		want    int // latency in ms; -1: not paired
	}
	for i, s := range []step{
		{false, 1, -1}, // a free slot
		{true, 2, 0},   // released before the second free slot is taken
		{false, 3, -1}, // the second free slot
		{false, 4, 2},  // the slot released at 2
		{true, 10, 0},
		{true, 11, 0},
		{false, 13, 3},  // released at 10
		{false, 15, 4},  // released at 11
		{false, 16, -1}, // no release accounts for it
	} {
		if s.release {
			l.release(ms(s.at))
			continue
		}
		got, paired := l.grant(ms(s.at))
		if s.want < 0 && paired || s.want >= 0 && (!paired || got != ms(s.want)) {
			t.Errorf("step %d, grant at %dms: got %v paired %v, want %dms", i, s.at, got, paired, s.want)
		}
	}
}
