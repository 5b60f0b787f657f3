package locktable_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

func BenchmarkSeen(b *testing.B) {
	const n = 100_000
	for _, layout := range []struct {
		name  string
		locks int // sessions spread over this many locks, in queues
	}{
		{"100000_holders", n},
		{"1000_locks_x100", 1000},
	} {
		b.Run(layout.name, func(b *testing.B) {
			tb, c, _ := newTable(b, locktable.Config{})
			for i := 0; i < n; i++ {
				r := locktable.Request{Name: fmt.Sprintf("lock-%d", i%layout.locks), Lease: time.Hour}
				if _, _, _, err := tb.Acquire(c.now, locktable.SessionID(i+1), r, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// Each beat is later than the last, so the lease slides and
				// the heap is fixed, as for a real heartbeat.
				if _, ok := tb.Seen(c.advance(time.Nanosecond), locktable.SessionID(i%n+1)); !ok {
					b.Fatal("session gone")
				}
				i++
			}
		})
	}
}

// BenchmarkSeenDeepQueue is the heartbeat of the last waiter of one long
// queue: its position is a walk to the head.
func BenchmarkSeenDeepQueue(b *testing.B) {
	for _, depth := range []int{100, 10_000} {
		b.Run(fmt.Sprint(depth), func(b *testing.B) {
			tb, c, _ := newTable(b, locktable.Config{})
			for i := 0; i <= depth; i++ {
				tb.Acquire(c.now, locktable.SessionID(i+1), req("q", time.Hour), nil)
			}
			last := locktable.SessionID(depth + 1)
			b.ReportAllocs()
			for b.Loop() {
				st, _ := tb.Seen(c.advance(time.Nanosecond), last)
				if st.Position != depth {
					b.Fatalf("position %d, want %d", st.Position, depth)
				}
			}
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	tb, c, _ := newTable(b, locktable.Config{})
	r := req("jobs", time.Second)
	var dst []locktable.Exit
	id := locktable.SessionID(0)
	b.ReportAllocs()
	for b.Loop() {
		id++
		st, _, _, _ := tb.Acquire(c.now, id, r, dst[:0])
		if !st.Held {
			b.Fatal("not granted")
		}
		dst, _ = tb.Release(c.now, id, dst[:0])
	}
}

// BenchmarkHandover releases the holder of a lock with 1000 waiters, which
// promotes the head; a new waiter joins the tail to keep the queue at 1000.
func BenchmarkHandover(b *testing.B) {
	const depth = 1000
	tb, c, _ := newTable(b, locktable.Config{})
	r := req("jobs", time.Hour)
	for id := 1; id <= depth+1; id++ {
		tb.Acquire(c.now, locktable.SessionID(id), r, nil)
	}
	holder, next := locktable.SessionID(1), locktable.SessionID(depth+2)
	var dst []locktable.Exit
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = tb.Release(c.now, holder, dst[:0])
		if len(dst) != 1 || len(dst[0].Promoted) == 0 {
			b.Fatalf("got exits %s, want one promotion", exitIDs(dst))
		}
		holder = dst[0].Promoted[0].ID
		tb.Acquire(c.now, next, r, nil)
		next++
	}
}

func BenchmarkSnapshot(b *testing.B) {
	for _, depth := range []int{10, 1000} {
		b.Run(fmt.Sprint(depth), func(b *testing.B) {
			tb, c, _ := newTable(b, locktable.Config{})
			for i := 0; i <= depth; i++ {
				tb.Acquire(c.now, locktable.SessionID(i+1), req("q", time.Hour), nil)
			}
			b.ReportAllocs()
			for b.Loop() {
				if li, _ := tb.Lock(c.now, "q"); len(li.Waiters) != depth {
					b.Fatal(len(li.Waiters))
				}
			}
		})
	}
}

// BenchmarkHandoverTickets is BenchmarkHandover on a table of version 3:
// every waiter gets a ticket, and tokens and tickets are indexed for the
// resumes.
func BenchmarkHandoverTickets(b *testing.B) {
	const depth = 1000
	tb, c := v3Table(b, locktable.Config{})
	r := req("jobs", time.Hour)
	for id := 1; id <= depth+1; id++ {
		tb.Acquire(c.now, locktable.SessionID(id), r, nil)
	}
	holder, next := locktable.SessionID(1), locktable.SessionID(depth+2)
	var dst []locktable.Exit
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = tb.Release(c.now, holder, dst[:0])
		if len(dst) != 1 || len(dst[0].Promoted) == 0 {
			b.Fatalf("got exits %s, want one promotion", exitIDs(dst))
		}
		holder = dst[0].Promoted[0].ID
		tb.Acquire(c.now, next, r, nil)
		next++
	}
}

// BenchmarkAcquireReleaseTickets is BenchmarkAcquireRelease on a table of
// version 3.
func BenchmarkAcquireReleaseTickets(b *testing.B) {
	tb, c := v3Table(b, locktable.Config{})
	r := req("jobs", time.Second)
	var dst []locktable.Exit
	id := locktable.SessionID(0)
	b.ReportAllocs()
	for b.Loop() {
		id++
		st, _, _, _ := tb.Acquire(c.now, id, r, dst[:0])
		if !st.Held {
			b.Fatal("not granted")
		}
		dst, _ = tb.Release(c.now, id, dst[:0])
	}
}
