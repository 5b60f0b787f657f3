package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/faultproxy"
)

// The checker: many clients contend for a few locks, each writing to a
// guarded resource during its critical sections, while faults are injected.
// The resource is fenced as a real one would be: it refuses a write whose
// token is lower than the highest it has accepted for that lock. The test
// keeps every section (token, start, end, writes) and checks afterwards
// that no two sections of one lock overlap unless the later one has the
// larger token and the resource refused the older one's writes from the
// moment the newer one had written.

// write is one write to the resource: its place in the resource's total
// order, its time, and whether the resource accepted it.
type write struct {
	seq int
	at  time.Time
	ok  bool
}

// section is one critical section: what a client did while it believed it
// held lock with token.
type section struct {
	lock   string
	client int
	token  uint64
	long   bool // its worker ignored the loss of the lock (a pause, a bug)
	start  time.Time
	end    time.Time
	writes []write
}

func (s *section) String() string {
	return fmt.Sprintf("client %d token %d [%v .. %v] long=%v writes=%d",
		s.client, s.token, s.start.Format("15:04:05.000000"), s.end.Format("15:04:05.000000"), s.long, len(s.writes))
}

// resource is the guarded resource: fenced per lock.
type resource struct {
	mu       sync.Mutex
	seq      int
	highest  map[string]uint64
	sections []*section
	active   map[int]*section // by client, while in a section
}

func newResource() *resource {
	return &resource{highest: map[string]uint64{}, active: map[int]*section{}}
}

// write applies a write with token to lock, refusing a stale token.
func (r *resource) write(lock string, token uint64) write {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	w := write{seq: r.seq, at: time.Now(), ok: token >= r.highest[lock]}
	if w.ok {
		r.highest[lock] = token
	}
	return w
}

// begin starts a section with its first write.
func (r *resource) begin(client int, lock string, token uint64, long bool) *section {
	s := &section{lock: lock, client: client, token: token, long: long, start: time.Now()}
	s.writes = append(s.writes, r.write(lock, token))
	r.mu.Lock()
	r.active[client] = s
	r.mu.Unlock()
	return s
}

func (r *resource) end(s *section) {
	s.end = time.Now()
	r.mu.Lock()
	delete(r.active, s.client)
	r.sections = append(r.sections, s)
	r.mu.Unlock()
}

// pickActive returns a client in a section, preferring one whose worker
// ignores a loss (the fault then needs fencing); -1 if none.
func (r *resource) pickActive(rng *rand.Rand) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var long, any []int
	for c, s := range r.active {
		any = append(any, c)
		if s.long {
			long = append(long, c)
		}
	}
	slices.Sort(long)
	slices.Sort(any)
	switch {
	case len(long) > 0:
		return long[rng.IntN(len(long))]
	case len(any) > 0:
		return any[rng.IntN(len(any))]
	}
	return -1
}

// lockOf is the lock client c is in a section of; "" if none.
func (r *resource) lockOf(c int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.active[c]; s != nil {
		return s.lock
	}
	return ""
}

func (r *resource) done() []*section {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sections)
}

// fault is an injected fault: of one client's link, or (client -1) of the
// server, which every client sees.
type fault struct {
	client int    // -1: every client
	lock   string // if set: whoever held this lock (a force-release)
	at     time.Time
	what   string
}

// checkStats are the checker's counts.
type checkStats struct {
	sections      int
	overlaps      int // pairs of sections of one lock that overlapped in time
	unexplained   int // overlaps with no fault injected near the older one (scheduling delays)
	fencedWrites  int // writes the resource refused
	fencedSection int // sections with at least one refused write
}

// checkSections applies the checker's rules and returns the counts and
// every violation found.
func checkSections(sections []*section, faults []fault, lease time.Duration) (checkStats, []string) {
	var st checkStats
	var bad []string
	byLock := map[string][]*section{}
	for _, s := range sections {
		byLock[s.lock] = append(byLock[s.lock], s)
		st.sections++
		fenced := false
		for _, w := range s.writes {
			if !w.ok {
				st.fencedWrites++
				fenced = true
			}
		}
		if fenced {
			st.fencedSection++
		}
	}
	for lock, ss := range byLock {
		slices.SortFunc(ss, func(a, b *section) int { return a.start.Compare(b.start) })
		// Every grant of a lock has a token of its own.
		seen := map[uint64]*section{}
		for _, s := range ss {
			if o := seen[s.token]; o != nil {
				bad = append(bad, fmt.Sprintf("lock %q: token %d in two sections: %v and %v", lock, s.token, o, s))
			}
			seen[s.token] = s
		}
		for i, a := range ss {
			for _, b := range ss[i+1:] {
				if !b.start.Before(a.end) {
					break // sorted by start: no later one overlaps a
				}
				st.overlaps++
				if !faultNear(faults, a, b.start, lease) {
					st.unexplained++
				}
				if b.token <= a.token {
					bad = append(bad, fmt.Sprintf("lock %q: sections overlap and the later has the smaller token:\n  %v\n  %v", lock, a, b))
					continue
				}
				first := -1
				for _, w := range b.writes {
					if w.ok {
						first = w.seq
						break
					}
				}
				for _, w := range a.writes {
					if first >= 0 && w.seq > first && w.ok {
						bad = append(bad, fmt.Sprintf("lock %q: the resource accepted a write of token %d after one of token %d:\n  %v\n  %v", lock, a.token, b.token, a, b))
						break
					}
				}
			}
		}
		// The accepted writes, in the resource's order, come section by
		// section: once a newer section has written, an older never again.
		type acc struct {
			seq int
			s   *section
		}
		var all []acc
		for _, s := range ss {
			for _, w := range s.writes {
				if w.ok {
					all = append(all, acc{w.seq, s})
				}
			}
		}
		slices.SortFunc(all, func(x, y acc) int { return x.seq - y.seq })
		done := map[*section]bool{}
		for i, x := range all {
			if done[x.s] {
				bad = append(bad, fmt.Sprintf("lock %q: accepted writes of %v interleave with another section's", lock, x.s))
				break
			}
			if i > 0 && all[i-1].s != x.s {
				done[all[i-1].s] = true
			}
		}
	}
	return st, bad
}

// faultNear reports whether a fault hit a's client (or the server) between
// a lease before a began and until.
func faultNear(faults []fault, a *section, until time.Time, lease time.Duration) bool {
	for _, f := range faults {
		hit := f.client == a.client || (f.client == -1 && (f.lock == "" || f.lock == a.lock))
		if hit && !f.at.Before(a.start.Add(-2*lease)) && !f.at.After(until) {
			return true
		}
	}
	return false
}

// TestCheckerFindsViolations: the checker's rules catch overlapping
// holders, a later holder with a smaller token, a reused token, and a stale
// write the resource accepted; they pass a fenced overlap.
func TestCheckerFindsViolations(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	sec := func(client int, token uint64, from, to int, writes ...write) *section {
		return &section{lock: "l", client: client, token: token, start: at(from), end: at(to), writes: writes}
	}
	w := func(seq int, ok bool) write { return write{seq: seq, ok: ok} }
	for _, tc := range []struct {
		name     string
		sections []*section
		wantBad  bool
	}{
		{"one after the other", []*section{sec(1, 5, 0, 10, w(1, true)), sec(2, 6, 10, 20, w(2, true))}, false},
		{"fenced overlap", []*section{sec(1, 5, 0, 20, w(1, true), w(3, false)), sec(2, 6, 10, 30, w(2, true))}, false},
		{"stale write accepted", []*section{sec(1, 5, 0, 20, w(1, true), w(3, true)), sec(2, 6, 10, 30, w(2, true))}, true},
		{"later has smaller token", []*section{sec(1, 6, 0, 20, w(1, true)), sec(2, 5, 10, 30, w(2, false))}, true},
		{"token reused", []*section{sec(1, 5, 0, 10, w(1, true)), sec(2, 5, 10, 20, w(2, true))}, true},
	} {
		st, bad := checkSections(tc.sections, nil, time.Second)
		if (len(bad) > 0) != tc.wantBad {
			t.Errorf("%s: got violations %q (stats %+v), want violations %v", tc.name, bad, st, tc.wantBad)
		}
	}
}

// TestCheckerNoOverlap: 16 Go clients, each through a fault proxy of its
// own, contend for 3 locks against the real server for a few seconds while
// links are frozen (both ways, or one way) and reset, an operator
// force-releases locks, and the server is killed with kill -9 and
// restarted once. An eighth of the sections are
// worked by a worker that ignores the loss of the lock for a lease and a
// half (a pause, a bug); the faults aim at those. The checker's rules must
// hold; the count of fenced writes is reported.
func TestCheckerNoOverlap(t *testing.T) {
	t.Parallel()
	const (
		clients = 16
		lease   = 500 * time.Millisecond
		runFor  = 4 * time.Second
	)
	locks := []string{"alpha", "beta", "gamma"}
	srv := startServer(t, t.TempDir())
	res := newResource()
	var (
		faultsMu sync.Mutex
		faults   []fault
	)
	addFault := func(f fault) {
		faultsMu.Lock()
		faults = append(faults, f)
		faultsMu.Unlock()
	}

	var (
		opsMu   sync.Mutex
		opsAddr = srv.OpsAddr // changes with the restart
		forced  atomic.Int64  // force-releases that took a lock
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	proxies := make([]*faultproxy.Proxy, clients)
	sectionsBy := make([]int, clients)
	var wg sync.WaitGroup
	for i := range clients {
		proxies[i] = newProxy(t, srv.Addr)
		c, err := baton.New([]string{proxies[i].Addr()}, baton.WithLease(lease),
			baton.WithOwner(fmt.Sprintf("checker-%d", i)), baton.WithDialTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sectionsBy[i] = worker(ctx, i, c, res, locks, lease, 8, uint64(i))
		}()
	}

	// The faults, one at a time, aimed at clients in a section.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		for ctx.Err() == nil {
			if !pause(ctx, time.Duration(20+rng.IntN(60))*time.Millisecond) {
				return
			}
			c := res.pickActive(rng)
			if c < 0 {
				continue
			}
			px := proxies[c]
			switch k := rng.IntN(5); k {
			case 0, 1, 2:
				dir := []faultproxy.Direction{faultproxy.Both, faultproxy.Both, faultproxy.Up}[k]
				addFault(fault{client: c, at: time.Now(), what: "stall " + dir.String()})
				px.Stall(dir)
				pause(ctx, lease*3/2)
				px.Resume(dir)
			case 3:
				addFault(fault{client: c, at: time.Now(), what: "reset"})
				px.Reset()
			default: // an operator force-releases the lock c is working under
				lock := res.lockOf(c)
				if lock == "" {
					continue
				}
				addFault(fault{client: -1, lock: lock, at: time.Now(), what: "force-release"})
				opsMu.Lock()
				ops := opsAddr
				opsMu.Unlock()
				if resp, err := opsClient.Post("http://"+ops+"/v1/locks/"+lock+"/release", "", nil); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						forced.Add(1)
					}
				}
			}
		}
	}()

	// Halfway, the server is killed and restarted on its port.
	time.Sleep(runFor / 2)
	addFault(fault{client: -1, at: time.Now(), what: "server kill -9"})
	srv.Signal(t, syscall.SIGKILL)
	srv = restartServer(t, srv)
	opsMu.Lock()
	opsAddr = srv.OpsAddr
	opsMu.Unlock()
	time.Sleep(runFor / 2)
	stop()
	wg.Wait()

	sections := res.done()
	faultsMu.Lock()
	st, bad := checkSections(sections, faults, lease)
	nFaults := len(faults)
	faultsMu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	for i, n := range sectionsBy {
		if n == 0 {
			t.Errorf("client %d never held a lock in %v", i, runFor)
		}
	}
	if st.fencedWrites == 0 {
		t.Errorf("no write was fenced in %d sections and %d faults: the faults did not hit a worker that ignores its loss, and the test proved little", st.sections, nFaults)
	}
	t.Logf("checker: %d clients, %d locks, %d sections, %d faults (%d force-releases that took a lock); %d overlapping pairs (%d with no fault near: scheduling delays), all fenced: %d writes refused in %d sections",
		clients, len(locks), st.sections, nFaults, forced.Load(), st.overlaps, st.unexplained, st.fencedWrites, st.fencedSection)
}

// worker takes the locks in turn until ctx ends, running a section under
// each, and returns how many sections it ran. One section in longEvery (none
// if 0) ignores the loss of the lock and lasts a lease and a half.
func worker(ctx context.Context, id int, c *baton.Client, res *resource, locks []string, lease time.Duration, longEvery int, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	n := 0
	for ctx.Err() == nil {
		name := locks[rng.IntN(len(locks))]
		long := longEvery > 0 && rng.IntN(longEvery) == 0
		hold := time.Duration(2+rng.IntN(15)) * time.Millisecond
		if long {
			hold = lease * 3 / 2
		}
		err := c.Do(ctx, name, func(lctx context.Context, l *baton.Lock) error {
			n++
			s := res.begin(id, name, l.Token(), long)
			defer res.end(s)
			lost := lctx.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for deadline := time.Now().Add(hold); time.Now().Before(deadline); {
				select {
				case <-lost:
					if !long {
						return nil // a careful worker stops at once
					}
					lost = nil // a long one carries on regardless
				case <-tick.C:
					s.writes = append(s.writes, res.write(name, l.Token()))
				}
			}
			s.writes = append(s.writes, res.write(name, l.Token()))
			return nil
		})
		if err != nil && ctx.Err() == nil {
			// Lost, or the server is down: a short pause before trying again.
			pause(ctx, time.Duration(5+rng.IntN(20))*time.Millisecond)
		}
	}
	return n
}

// pause waits d or until ctx ends; false if ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
