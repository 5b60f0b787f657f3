package clusterharness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// The workload: client loops, each a Go client with every node's address,
// take one of a few names with a 1 s lease, read the fenced register, work
// a few milliseconds, write with their token and close. Every event is
// stamped with time.Now in this one process, whose monotonic reading is
// the one clock of the run.

const (
	lease = time.Second
	// acquireWait bounds one Acquire, so that a loop stuck on a dead
	// address starts over (the client has its own retries inside it).
	acquireWait = 15 * time.Second
)

// hold is one grant as its client lived it.
type hold struct {
	client  int
	name    string
	token   uint64
	granted time.Time // Acquire returned the Lock
	// shared: a shared claim (protocol version 2) with limit; asked is
	// when its ACQUIRE was sent (zero when not known).
	shared bool
	limit  int
	asked  time.Time
	// Written by the client's goroutine before finish; read by the
	// checker after the workload stopped.
	ended     time.Time // the holder saw its loss, or was about to close
	lost      error     // why it was lost (nil if it closed)
	readAbove uint64    // a register value above its token that it read (0: none)
	// survive: the claim must outlive the run's faults (rule 4 of the
	// checker); validUntil is the last deadline its client gave it.
	survive    bool
	validUntil time.Time
}

func (h *hold) String() string {
	how := "closed"
	if h.lost != nil {
		how = "lost: " + h.lost.Error()
	}
	kind := ""
	if h.shared {
		kind = fmt.Sprintf(", shared of %d", h.limit)
	}
	return fmt.Sprintf("client %d token %d (epoch %d%s) %s .. %s (%s)", h.client, h.token, h.token>>40, kind,
		h.granted.Format("15:04:05.000"), h.ended.Format("15:04:05.000"), how)
}

// regWrite is one write to the register.
type regWrite struct {
	name  string
	token uint64
	at    time.Time
	ok    bool
}

// register is the fenced resource: per name, it takes a write only with a
// token at least the highest it has taken.
type register struct {
	mu      sync.Mutex
	highest map[string]uint64
	writes  []regWrite
}

func newRegister() *register { return &register{highest: map[string]uint64{}} }

func (r *register) read(name string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest[name]
}

func (r *register) write(name string, token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := token >= r.highest[name]
	if ok {
		r.highest[name] = token
	}
	r.writes = append(r.writes, regWrite{name: name, token: token, at: time.Now(), ok: ok})
	return ok
}

// workload runs client loops until stop.
type workload struct {
	reg    *register
	slots  *slotCounter // the shared believers' resource
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	holds []*hold
	errs  map[string]int // Acquire errors, by their text up to the first colon
	bad   []string       // violations seen on the way (runLog.bad)
	// lost and queues: runLog's (resume_test.go)
	lost   []string
	queues map[string][]int
}

func newWorkload() *workload {
	w := &workload{reg: newRegister(), slots: newSlotCounter(), errs: map[string]int{}, queues: map[string][]int{}}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// loops starts n client loops (ids from firstID) with addrs over names;
// the loops end at stop.
func (w *workload) loops(t *testing.T, n, firstID int, addrs, names []string) {
	t.Helper()
	for i := firstID; i < firstID+n; i++ {
		c, err := baton.New(addrs, baton.WithLease(lease), baton.WithOwner(fmt.Sprintf("loop-%d", i)),
			baton.WithDialTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.loop(c, i, names)
		}()
	}
}

func (w *workload) loop(c *baton.Client, id int, names []string) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for w.ctx.Err() == nil {
		name := names[rng.IntN(len(names))]
		l, err := w.acquire(c, name)
		if err != nil {
			w.idle(time.Duration(10+rng.IntN(40)) * time.Millisecond)
			continue
		}
		w.work(id, l, time.Duration(2+rng.IntN(20))*time.Millisecond, 0)
	}
}

// acquire is one Acquire bounded by acquireWait; its error is counted.
func (w *workload) acquire(c *baton.Client, name string) (*baton.Lock, error) {
	ctx, cancel := context.WithTimeout(w.ctx, acquireWait)
	defer cancel()
	l, err := c.Acquire(ctx, name)
	if err != nil && w.ctx.Err() == nil {
		// The kind: the text without the lock's name, up to the details.
		kind := strings.ReplaceAll(err.Error(), fmt.Sprintf("%q", name), "NAME")
		kind = strings.Join(strings.Fields(kind), " ") // one line (an error per address has several)
		if i := strings.Index(kind, " ("); i > 0 {
			kind = kind[:i]
		}
		if errors.Is(err, context.DeadlineExceeded) {
			kind = "no grant within " + acquireWait.String()
		}
		w.mu.Lock()
		w.errs[kind]++
		w.mu.Unlock()
	}
	return l, err
}

// work runs one critical section under l: read the register, work for d
// (or until the loss is seen), write with the token, close. With every > 0
// it also writes every that often while it works (a holder that keeps its
// resource busy).
func (w *workload) work(id int, l *baton.Lock, d, every time.Duration) *hold {
	h := &hold{client: id, name: l.Name(), token: l.Token(), granted: time.Now()}
	lostAt := make(chan time.Time, 1)
	stop := context.AfterFunc(l.Context(), func() { lostAt <- time.Now() })
	if seen := w.reg.read(h.name); seen > h.token {
		h.readAbove = seen
	}
	w.mu.Lock()
	w.holds = append(w.holds, h)
	w.mu.Unlock()
	done := time.NewTimer(d)
	var tick <-chan time.Time
	if every > 0 {
		tk := time.NewTicker(every)
		defer tk.Stop()
		tick = tk.C
	}
	for working := true; working; {
		select {
		case <-done.C:
			w.reg.write(h.name, h.token)
			working = false
		case <-tick:
			w.reg.write(h.name, h.token)
		case <-l.Done():
			working = false
		case <-w.ctx.Done():
			working = false
		}
	}
	done.Stop()
	end, lost := time.Now(), error(nil)
	if !stop() {
		end, lost = <-lostAt, l.Err()
	}
	w.mu.Lock()
	h.ended, h.lost = end, lost
	w.mu.Unlock()
	l.Release()
	return h
}

// stop ends the loops and returns what they recorded.
func (w *workload) stop() runLog {
	w.cancel()
	w.wg.Wait()
	refused := w.slots.refused()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	return runLog{holds: slices.Clone(w.holds), writes: slices.Clone(w.reg.writes), slotRefusals: refused, bad: slices.Clone(w.bad),
		lost: slices.Clone(w.lost), queues: maps.Clone(w.queues)}
}

// snapshot returns what the loops recorded so far, while they run; a hold
// still running ends now in it.
func (w *workload) snapshot() runLog {
	refused := w.slots.refused()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	now := time.Now()
	var hs []*hold
	for _, h := range w.holds {
		c := *h
		if c.ended.IsZero() {
			c.ended = now
		}
		hs = append(hs, &c)
	}
	return runLog{holds: hs, writes: slices.Clone(w.reg.writes), slotRefusals: refused, bad: slices.Clone(w.bad),
		lost: slices.Clone(w.lost)}
}

// firstGrant is the first grant at or after t0 whose token's epoch is above
// epoch; nil if none yet.
func (w *workload) firstGrant(t0 time.Time, epoch uint64) *hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first *hold
	for _, h := range w.holds {
		if !h.granted.Before(t0) && h.token>>40 > epoch && (first == nil || h.granted.Before(first.granted)) {
			first = h
		}
	}
	return first
}

// errorSummary lists the Acquire errors by kind, most frequent first.
func (w *workload) errorSummary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var kinds []string
	for k := range w.errs {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return w.errs[kinds[i]] > w.errs[kinds[j]] })
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n  %6d  %s", w.errs[k], k)
	}
	return b.String()
}

// errorSummaryOf is w's error summary, formatted when the message is: a
// failure message built before a wait shows the errors at its end.
func errorSummaryOf(w *workload) fmt.Stringer { return lazyString(w.errorSummary) }

type lazyString func() string

func (f lazyString) String() string { return f() }

// idle waits d, or less if the workload stops meanwhile.
func (w *workload) idle(d time.Duration) { idle(w.ctx, d) }

// idle waits d, or less if ctx ends meanwhile.
func idle(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
