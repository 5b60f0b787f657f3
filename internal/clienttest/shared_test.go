package clienttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// These tests run the client's shared claims (protocol version 2) against
// the real server: a semaphore, a read/write lock, LIMIT_MISMATCH and
// NOWAIT. Each contender has a Client of its own, as processes would.

// lockView returns the server's view of name (empty if nobody holds or
// waits).
func lockView(srv *server.Server, name string) server.LockView {
	lv, _ := srv.Lock(name)
	return lv
}

// holderTokens lists the tokens of the holders of name, in grant order.
func holderTokens(srv *server.Server, name string) []uint64 {
	var out []uint64
	for _, h := range lockView(srv, name).Holders {
		out = append(out, h.Token)
	}
	return out
}

// granted fails unless ch has a result at once, or within: the Acquire
// was granted, or is about to return.
func granted(t *testing.T, ch <-chan acquireResult, what string) *baton.Lock {
	t.Helper()
	r := waitResult(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	return r.l
}

// notGranted fails if ch has a result: the Acquire returned.
func notGranted(t *testing.T, ch <-chan acquireResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned (%v, token %d), want it waiting", what, r.err, tokenOf(r.l))
	default:
	}
}

func tokenOf(l *baton.Lock) uint64 {
	if l == nil {
		return 0
	}
	return l.Token()
}

// TestSemaphoreOfThree: five contenders for a semaphore of 3. Three hold at
// once; the other two wait in the order they came, and each freed slot
// goes to the head of the queue at once; every contender gets in, with
// tokens rising in grant order.
func TestSemaphoreOfThree(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const name = "sem/three"
	contender := func(i int) *baton.Client {
		return newTestClient(t, []string{srv.Addr}, baton.WithLimit(3), baton.WithOwner(fmt.Sprintf("c%d", i)))
	}
	var locks [5]*baton.Lock
	for i := range 3 {
		locks[i] = acquire(t, contender(i), name)
		if !locks[i].Shared() || locks[i].Limit() != 3 {
			t.Fatalf("contender %d: Shared %v, Limit %d; want a slot of 3", i, locks[i].Shared(), locks[i].Limit())
		}
	}
	ch3 := acquireLater(t, srv.Srv, contender(3), name)
	ch4 := acquireLater(t, srv.Srv, contender(4), name)
	lv := lockView(srv.Srv, name)
	if len(lv.Holders) != 3 || lv.Limit != 3 || len(lv.Waiters) != 2 || lv.Waiters[0].Owner != "c3" || lv.Waiters[1].Owner != "c4" {
		t.Fatalf("server: %d holders, limit %d, waiters %+v; want 3 holders, limit 3, waiters c3 then c4", len(lv.Holders), lv.Limit, lv.Waiters)
	}
	notGranted(t, ch3, "the fourth contender")
	notGranted(t, ch4, "the fifth contender")

	// The middle holder leaves: its slot goes to the head (c3), not c4.
	locks[1].Release()
	locks[3] = granted(t, ch3, "the fourth contender, after a slot was freed")
	notGranted(t, ch4, "the fifth contender, behind the fourth")
	if lv := lockView(srv.Srv, name); len(lv.Holders) != 3 || len(lv.Waiters) != 1 || lv.Waiters[0].Owner != "c4" {
		t.Fatalf("server: %d holders, waiters %+v; want 3 holders, c4 waiting", len(lv.Holders), lv.Waiters)
	}
	locks[0].Release()
	locks[4] = granted(t, ch4, "the fifth contender")
	for i := 1; i < 5; i++ {
		if locks[i].Token() <= locks[i-1].Token() {
			t.Errorf("contender %d's token %d is not above contender %d's %d: grants out of queue order", i, locks[i].Token(), i-1, locks[i-1].Token())
		}
	}
	if got := holderTokens(srv.Srv, name); len(got) != 3 || got[0] != locks[2].Token() || got[1] != locks[3].Token() || got[2] != locks[4].Token() {
		t.Errorf("server: holder tokens %v, want those of contenders 2, 3, 4: %d %d %d", got, locks[2].Token(), locks[3].Token(), locks[4].Token())
	}
}

// TestSemaphoreNeverOverfull: five contenders take a semaphore of 3 again
// and again, through Do; never more than three are inside at once, by
// their own count and by the server's, and every one gets in every time.
func TestSemaphoreNeverOverfull(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const (
		name   = "sem/churn"
		rounds = 8
	)
	var (
		inside, most atomic.Int32
		grants       atomic.Int32
		tokensMu     sync.Mutex
		tokens       = map[uint64]bool{}
		wg           sync.WaitGroup
		stop         = make(chan struct{})
		sampled      = make(chan int)
	)
	// The server's count, sampled while the contenders run.
	go func() {
		most := 0
		for {
			select {
			case <-stop:
				sampled <- most
				return
			default:
			}
			most = max(most, len(lockView(srv.Srv, name).Holders))
			time.Sleep(time.Millisecond)
		}
	}()
	for i := range 5 {
		c := newTestClient(t, []string{srv.Addr}, baton.WithLimit(3), baton.WithOwner(fmt.Sprintf("c%d", i)))
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := c.Do(ctx, name, func(ctx context.Context, l *baton.Lock) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					grants.Add(1)
					tokensMu.Lock()
					dup := tokens[l.Token()]
					tokens[l.Token()] = true
					tokensMu.Unlock()
					if dup {
						return fmt.Errorf("token %d granted twice", l.Token())
					}
					time.Sleep(2 * time.Millisecond)
					return l.Err()
				})
				cancel()
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	serverMost := <-sampled
	if got := most.Load(); got > 3 {
		t.Errorf("%d contenders inside at once, want at most 3", got)
	}
	if serverMost > 3 {
		t.Errorf("the server listed %d holders at once, want at most 3", serverMost)
	}
	if got := grants.Load(); got != 5*rounds {
		t.Errorf("%d grants, want %d: every contender gets in every round", got, 5*rounds)
	}
	t.Logf("most inside at once: %d by the contenders, %d by the server's view", most.Load(), serverMost)
}

// TestReadWriteLock: readers hold together; a writer waits for them and then
// holds alone; readers that come after a waiting writer wait behind it
// (nobody overtakes), and are let in together when it leaves.
func TestReadWriteLock(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const name = "rw/config"
	reader := func(owner string) *baton.Client {
		return newTestClient(t, []string{srv.Addr}, baton.WithShared(true), baton.WithOwner(owner))
	}
	r1 := acquire(t, reader("r1"), name)
	r2 := acquire(t, reader("r2"), name)
	if !r1.Shared() || r1.Limit() != baton.ReaderLimit {
		t.Fatalf("reader: Shared %v, Limit %d; want a reader (limit %d)", r1.Shared(), r1.Limit(), baton.ReaderLimit)
	}
	if n := len(lockView(srv.Srv, name).Holders); n != 2 {
		t.Fatalf("server: %d holders, want the two readers together", n)
	}
	chW := acquireLater(t, srv.Srv, newTestClient(t, []string{srv.Addr}, baton.WithOwner("w")), name)
	chR3 := acquireLater(t, srv.Srv, reader("r3"), name)
	chR4 := acquireLater(t, srv.Srv, reader("r4"), name)
	notGranted(t, chR3, "a reader behind a waiting writer")
	notGranted(t, chR4, "a second reader behind a waiting writer")

	r1.Release()
	batontest.Eventually(t, 5*time.Second, func() bool { return len(lockView(srv.Srv, name).Holders) == 1 },
		"the server still lists the reader that left")
	if lv := lockView(srv.Srv, name); len(lv.Waiters) != 3 || lv.Waiters[0].Owner != "w" {
		t.Fatalf("server: waiters %+v, want the writer at the head while a reader holds", lv.Waiters)
	}
	notGranted(t, chW, "the writer while a reader holds")
	r2.Release()
	w := granted(t, chW, "the writer, once the readers left")
	if w.Shared() || w.Limit() != 1 {
		t.Errorf("writer: Shared %v, Limit %d; want exclusive", w.Shared(), w.Limit())
	}
	lv := lockView(srv.Srv, name)
	if len(lv.Holders) != 1 || lv.Holders[0].Shared || len(lv.Waiters) != 2 {
		t.Fatalf("server: holders %+v, %d waiters; want the writer alone, two readers waiting", lv.Holders, len(lv.Waiters))
	}
	notGranted(t, chR3, "a reader while the writer holds")
	w.Release()
	r3 := granted(t, chR3, "the third reader, after the writer")
	r4 := granted(t, chR4, "the fourth reader, after the writer")
	if n := len(lockView(srv.Srv, name).Holders); n != 2 {
		t.Errorf("server: %d holders, want the two readers together", n)
	}
	if !(r2.Token() < w.Token() && w.Token() < r3.Token() && r3.Token() < r4.Token()) {
		t.Errorf("tokens: readers %d %d, writer %d, readers %d %d; want them rising in grant order",
			r1.Token(), r2.Token(), w.Token(), r3.Token(), r4.Token())
	}
}

// TestWriterNotStarved: readers come and go so that some reader always
// holds; a writer that queues among them still gets in, once the readers
// ahead of it have left (with reader preference it would wait forever).
func TestWriterNotStarved(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const name = "rw/stream"
	stop := make(chan struct{})
	var (
		wg    sync.WaitGroup
		reads atomic.Int32
	)
	// Three readers, each taking the read lock again as soon as it lets go,
	// so that the read holds overlap and the name never goes free of
	// readers by itself.
	for i := range 3 {
		c := newTestClient(t, []string{srv.Addr}, baton.WithShared(true), baton.WithOwner(fmt.Sprintf("r%d", i)))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := c.Do(ctx, name, func(ctx context.Context, l *baton.Lock) error {
					reads.Add(1)
					time.Sleep(time.Duration(10+5*i) * time.Millisecond)
					return nil
				})
				cancel()
				if err != nil {
					t.Errorf("reader %d: %v", i, err)
					return
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	batontest.Eventually(t, 10*time.Second, func() bool { return reads.Load() >= 10 }, "the readers do not get going")

	w := newTestClient(t, []string{srv.Addr}, baton.WithOwner("writer"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := w.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("the writer among a stream of readers: %v (readers held %d times meanwhile)", err, reads.Load())
	}
	waited := time.Since(start)
	lv := lockView(srv.Srv, name)
	if len(lv.Holders) != 1 || lv.Holders[0].Owner != "writer" {
		t.Errorf("server: holders %+v, want the writer alone", lv.Holders)
	}
	l.Release()
	t.Logf("the writer waited %v among readers", waited)
}

// TestLimitMismatchAgainstServer: a shared claim whose limit differs from the
// name's fails at once with the limit in force, on its one connection (no
// retry), NOWAIT included (LIMIT_MISMATCH, not BUSY); once the name's last
// shared session ends, a new limit is set.
func TestLimitMismatchAgainstServer(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const name = "sem/limit"
	holder := acquire(t, newTestClient(t, []string{srv.Addr}, baton.WithLimit(3)), name)
	for _, tc := range []struct {
		what  string
		opts  []baton.Option
		asked int
	}{
		{"a slot of another limit", []baton.Option{baton.WithLimit(2)}, 2},
		{"a NOWAIT slot of another limit", []baton.Option{baton.WithLimit(2), baton.WithNoWait(true)}, 2},
		{"a reader", []baton.Option{baton.WithShared(true)}, baton.ReaderLimit},
	} {
		proxy := newProxy(t, srv.Addr)
		// Connections are counted: a claim of protocol version 3 would
		// add the one its fallback to version 2 costs on a server that
		// does not speak it.
		c := newTestClient(t, []string{proxy.Addr()}, baton.WithResume(false))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		_, err := c.Acquire(ctx, name, tc.opts...)
		took := time.Since(start)
		cancel()
		var lm *baton.LimitMismatchError
		if !errors.As(err, &lm) || !errors.Is(err, baton.ErrLimitMismatch) || lm.Limit != 3 || lm.Asked != tc.asked {
			t.Errorf("%s: %v, want a *LimitMismatchError of limit 3, asked %d", tc.what, err, tc.asked)
			continue
		}
		if baton.IsRetryable(err) {
			t.Errorf("%s: IsRetryable = true, want false", tc.what)
		}
		if n := proxy.Accepted(); n != 1 {
			t.Errorf("%s: %d connections, want 1 (not retried)", tc.what, n)
		}
		if took > 5*time.Second {
			t.Errorf("%s: refused after %v, want at once", tc.what, took)
		}
	}
	// An exclusive claim neither sets nor checks the limit: it waits.
	ch := acquireLater(t, srv.Srv, newTestClient(t, []string{srv.Addr}), name)
	holder.Release()
	excl := granted(t, ch, "the exclusive claim")
	excl.Release()
	// The last shared session has ended: a new limit holds.
	l := acquire(t, newTestClient(t, []string{srv.Addr}), name, baton.WithLimit(2))
	if lv := lockView(srv.Srv, name); lv.Limit != 2 || l.Limit() != 2 {
		t.Errorf("server limit %d, lock limit %d; want 2 set anew", lv.Limit, l.Limit())
	}
}

// TestNoWaitOnFullSemaphore: a NOWAIT slot is granted while a slot is free
// and nobody waits; it is refused with ErrBusy while every slot is held,
// and while another claim waits even with a slot free (nobody overtakes).
func TestNoWaitOnFullSemaphore(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	const name = "sem/nowait"
	slot := func() *baton.Client { return newTestClient(t, []string{srv.Addr}, baton.WithLimit(2)) }
	a := acquire(t, slot(), name)
	acquire(t, slot(), name, baton.WithNoWait(true)) // the second slot is free
	_, err := slot().Acquire(context.Background(), name, baton.WithNoWait(true))
	if want := `acquire "sem/nowait": BUSY: lock "sem/nowait" has no free slot: 2 of 2 held`; !errors.Is(err, baton.ErrBusy) || err.Error() != want {
		t.Errorf("NOWAIT on a full semaphore: %v, want %q", err, want)
	}
	if baton.IsRetryable(err) {
		t.Errorf("IsRetryable(%v) = true, want false", err)
	}
	// An exclusive claim waits; a slot is freed, yet a NOWAIT slot may not
	// pass the waiter.
	ch := acquireLater(t, srv.Srv, newTestClient(t, []string{srv.Addr}), name)
	a.Release()
	batontest.Eventually(t, 5*time.Second, func() bool { return len(lockView(srv.Srv, name).Holders) == 1 },
		"the server still lists the slot that was released")
	_, err = slot().Acquire(context.Background(), name, baton.WithNoWait(true))
	if want := `acquire "sem/nowait": BUSY: lock "sem/nowait" has 1 waiting, who go first`; !errors.Is(err, baton.ErrBusy) || err.Error() != want {
		t.Errorf("NOWAIT slot behind a waiter: %v, want %q", err, want)
	}
	notGranted(t, ch, "the exclusive claim while a slot holds")
}

// TestDoAllReaderAndWriter: DoAll with ForName holds a reader's claim on
// one name and a writer's on another; the server sees each kind, and a
// second reader of the first name gets in beside it while the writer's
// name is refused to another writer.
func TestDoAllReaderAndWriter(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	c := newTestClient(t, []string{srv.Addr})
	other := newTestClient(t, []string{srv.Addr})
	err := c.DoAll(context.Background(), []string{"data", "config"}, func(ctx context.Context, set *baton.LockSet) error {
		cfg, data := lockView(srv.Srv, "config"), lockView(srv.Srv, "data")
		if len(cfg.Holders) != 1 || !cfg.Holders[0].Shared || cfg.Limit != baton.ReaderLimit {
			t.Errorf("config: holders %+v, limit %d; want one reader", cfg.Holders, cfg.Limit)
		}
		if len(data.Holders) != 1 || data.Holders[0].Shared {
			t.Errorf("data: holders %+v; want one writer", data.Holders)
		}
		r, err := other.Acquire(ctx, "config", baton.WithShared(true), baton.WithNoWait(true))
		if err != nil {
			t.Errorf("a second reader of config: %v, want it beside the set's reader", err)
		} else {
			r.Release()
		}
		if _, err := other.Acquire(ctx, "data", baton.WithNoWait(true)); !errors.Is(err, baton.ErrBusy) {
			t.Errorf("a second writer of data: %v, want ErrBusy", err)
		}
		return set.Err()
	}, baton.ForName("config", baton.WithShared(true)))
	if err != nil {
		t.Fatal(err)
	}
}
