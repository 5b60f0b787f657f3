package fence_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/clients/go/fence"
	"github.com/batonlock/baton/internal/batontest"
)

// kits are the guarded counters of the scenarios, each made afresh.
func kits(t *testing.T) []struct {
	name string
	make func(t *testing.T) resource
} {
	pg, db := startPG(t)
	return []struct {
		name string
		make func(t *testing.T) resource
	}{
		{"postgres", func(t *testing.T) resource { return newPGResource(t, pg, db) }},
		{"redis", func(t *testing.T) resource { return newRedisResource(t) }},
		{"http/memory", func(t *testing.T) resource { return newHTTPResource(t, fence.NewMemoryStore()) }},
		{"http/postgres", func(t *testing.T) resource {
			newPGResource(t, pg, db) // clears the marks
			return newHTTPResource(t, &fence.PostgresStore{DB: db})
		}},
		{"http/redis", func(t *testing.T) resource {
			r := newRedisResource(t)
			k := r.kit(t, true).(*redisKit)
			return newHTTPResource(t, &fence.RedisStore{Do: k.do})
		}},
		{"file", func(t *testing.T) resource { return newFileResource(t) }},
	}
}

// TestStaleHolder: holder A, a real process, reads the counter (0) and is
// stopped with SIGSTOP past its lease; the server grants B, which reads 0
// and writes 1; A is resumed and writes 1. Fenced, A's write is refused
// and B's stands. Unfenced (the control, which shows the test can fail),
// A's write is accepted and B's update is lost.
func TestStaleHolder(t *testing.T) {
	ts := batontest.StartServer(t)
	for _, kit := range kits(t) {
		for _, fenced := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fenced=%v", kit.name, fenced), func(t *testing.T) {
				res := kit.make(t)
				verb, arg := staleHolder(t, ts, res, fenced)
				n, writer := res.value(t)
				t.Logf("A's late write: %s %s; the counter: %d by %s", verb, arg, n, writer)
				switch {
				case fenced && (verb != "refused" || n != 1 || writer != "B"):
					t.Fatalf("fenced: A's late write %s %s, counter %d by %q; want A refused and B's 1 standing", verb, arg, n, writer)
				case !fenced && (verb != "accepted" || n != 1 || writer != "A"):
					t.Fatalf("unfenced: A's late write %s %s, counter %d by %q; want the lost update (A's 1 over B's)", verb, arg, n, writer)
				}
			})
		}
	}
}

// staleHolder plays the scenario and returns A's answer to its late write.
func staleHolder(t *testing.T, ts *batontest.Server, res resource, fenced bool) (verb, arg string) {
	t.Helper()
	events := make(chan childLine, 16)
	a := startChild(t, ts.Addr, res, fenced, "A", 1, time.Second, events)
	expect(t, events, a, "granted")
	if got := expect(t, events, a, "holding"); got != "0" {
		t.Fatalf("A read %s, want 0", got)
	}
	a.signal(syscall.SIGSTOP)
	stopped := time.Now()
	batontest.Eventually(t, 15*time.Second, func() bool {
		_, held := ts.Srv.Lock(lockName)
		return !held
	}, "the stopped holder's lease did not end")
	t.Logf("A's lease ended %v after SIGSTOP", time.Since(stopped).Round(time.Millisecond))

	c, err := baton.New([]string{ts.Addr}, baton.WithOwner("B"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, lockName)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	k := res.kit(t, fenced)
	n, err := k.begin(ctx, l)
	if err != nil || n != 0 {
		t.Fatalf("B's read: %d, %v; want 0", n, err)
	}
	if err := k.write(ctx, l, n+1, "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	a.signal(syscall.SIGCONT)
	a.send("write")
	e := next(t, events)
	if e.c != a || (e.verb != "refused" && e.verb != "accepted") {
		t.Fatalf("got %s %s from %s, want A's answer", e.verb, e.arg, e.c.name)
	}
	return e.verb, e.arg
}

// TestCounterUnderChaos: 8 holder processes increment the counter under
// the lock while the test force-releases holders between their read and
// their write (their write then goes out after the next holder's read),
// and kills holders with SIGKILL while they hold. Fenced, the counter ends
// equal to the number of writes the resource accepted. Unfenced (the
// control), late writes are accepted and updates are lost: it ends lower.
func TestCounterUnderChaos(t *testing.T) {
	ts := batontest.StartServer(t)
	for _, kit := range kits(t) {
		if kit.name == "http/postgres" || kit.name == "http/redis" {
			continue // the same Guard as http/memory; their stores are in TestStaleHolder
		}
		for _, fenced := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fenced=%v", kit.name, fenced), func(t *testing.T) {
				res := kit.make(t)
				st := chaos(t, ts, res, fenced)
				n, _ := res.value(t)
				t.Logf("%+v; the counter: %d", st, n)
				if fenced && n != st.accepted {
					t.Fatalf("fenced: the counter is %d after %d accepted writes (%+v)", n, st.accepted, st)
				}
				if !fenced && n >= st.accepted {
					t.Fatalf("unfenced: the counter is %d after %d accepted writes, want lost updates (%+v)", n, st.accepted, st)
				}
				switch r := res.(type) {
				case *pgResource:
					if got := r.accepted(t); got != st.accepted {
						t.Fatalf("PostgreSQL committed %d writes, the holders saw %d accepted", got, st.accepted)
					}
				case *httpResource:
					if r.accepted != st.accepted {
						t.Fatalf("the service accepted %d writes, the holders saw %d accepted", r.accepted, st.accepted)
					}
				}
			})
		}
	}
}

type chaosStats struct {
	accepted, refused, refusedAtCheck int
	forced, late, killed              int
}

// chaos runs 8 holders until enough writes and faults have happened; no
// holder is killed while its write is under way, so every accepted write
// is counted.
func chaos(t *testing.T, ts *batontest.Server, res resource, fenced bool) chaosStats {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, seed))
	events := make(chan childLine, 256)
	spawned := 0
	spawn := func() {
		spawned++
		startChild(t, ts.Addr, res, fenced, fmt.Sprint("w", spawned), 1000, 5*time.Second, events)
	}
	for range 8 {
		spawn()
	}
	var (
		st       chaosStats
		writing  = map[*child]bool{}
		late     []*child // force-released holders; they write after the next holder's read
		finished bool
	)
	enough := func() bool {
		return st.accepted >= 30 && st.forced >= 4 && st.late >= 3 && st.killed >= 3
	}
	for deadline := time.Now().Add(2 * time.Minute); !finished || len(writing) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("not done within 2 minutes: %+v", st)
		}
		e := next(t, events)
		switch e.verb {
		case "granted":
		case "accepted", "refused":
			switch {
			case writing[e.c] && e.verb == "accepted":
				st.accepted++
			case writing[e.c]:
				st.refused++
			default:
				st.refusedAtCheck++
			}
			delete(writing, e.c)
		case "holding":
			for _, c := range late {
				c.send("write")
				writing[c] = true
				st.late++
			}
			late = nil
			if finished = finished || enough(); finished {
				e.c.send("exit")
				continue
			}
			switch r := rnd.Float64(); {
			case r < 0.1:
				e.c.signal(syscall.SIGKILL)
				st.killed++
				spawn()
			case r < 0.35:
				if _, err := ts.Srv.ForceReleaseAll(lockName); err != nil {
					t.Fatalf("force-release: %v", err)
				}
				st.forced++
				if r < 0.15 {
					e.c.send("write") // at once: before the next holder's read
					writing[e.c] = true
				} else {
					late = append(late, e.c)
				}
			default:
				e.c.send("write")
				writing[e.c] = true
			}
		default:
			t.Fatalf("child %s: %s %s", e.c.name, e.verb, e.arg)
		}
	}
	for _, c := range late {
		c.send("exit")
	}
	return st
}
