package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/batonlock/baton/bench/internal/system"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait in these tests: far above any handover
// (Redis's retry sleeps are at most 250 ms), low enough to fail a hang.
const waitLimit = 20 * time.Second

// A peer under test and a way to see, from outside the waiting client,
// that some client is waiting for a lock.
type peerUnderTest struct {
	sys system.System
	// waiting reports how many clients wait for name.
	waiting func(t testing.TB, name string) int
	// newClient opens a client of sys (for Redis, one that reports its
	// retries to waiting).
	newClient func(t testing.TB) system.Client
}

// eachPeer runs f once per peer whose BENCH_ variable is set, skipping the
// others with a message. X is *testing.T or *testing.B.
func eachPeer[X interface {
	testing.TB
	Run(string, func(X)) bool
}](x X, f func(t X, p *peerUnderTest)) {
	cfg := ConfigFromEnv()
	for _, c := range []struct {
		name, variable, addr string
		setup                func(t testing.TB, addr string) *peerUnderTest
	}{
		{"redis", "BENCH_REDIS_ADDR", cfg.RedisAddr, redisUnderTest(RedisOptions{})},
		{"redis-1ms", "BENCH_REDIS_ADDR", cfg.RedisAddr, redisUnderTest(RedisOptions{
			Name: "redis-1ms", MinRetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond,
		})},
		{"postgres", "BENCH_POSTGRES_DSN", cfg.PostgresDSN, postgresUnderTest},
		{"etcd", "BENCH_ETCD_ENDPOINT", cfg.EtcdEndpoint, etcdUnderTest},
		{"zookeeper", "BENCH_ZOOKEEPER", cfg.ZooKeeper, zookeeperUnderTest},
	} {
		x.Run(c.name, func(t X) {
			if c.addr == "" {
				t.Skipf("%s is not set: start the peers with bench/peers/start.sh and source its peers.env", c.variable)
			}
			p := c.setup(t, c.addr)
			if p.newClient == nil {
				p.newClient = func(t testing.TB) system.Client { return openClient(t, p.sys) }
			}
			f(t, p)
		})
	}
}

func openClient(t testing.TB, sys system.System) system.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	c, err := sys.NewClient(ctx, 0)
	if err != nil {
		t.Fatalf("new %s client: %v", sys.Name(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func redisUnderTest(opts RedisOptions) func(t testing.TB, addr string) *peerUnderTest {
	return func(t testing.TB, addr string) *peerUnderTest { return redisWithOptions(addr, opts) }
}

func redisWithOptions(addr string, opts RedisOptions) *peerUnderTest {
	sys := NewRedis(addr, opts)
	var mu sync.Mutex
	waiters := map[string]map[*redisClient]bool{}
	return &peerUnderTest{
		sys: sys,
		// Redis keeps no queue: a client waits from its first refused
		// SET NX until its Lock returns.
		waiting: func(t testing.TB, name string) int {
			mu.Lock()
			defer mu.Unlock()
			return len(waiters[keyPrefix+name])
		},
		newClient: func(t testing.TB) system.Client {
			c := openClient(t, sys).(*redisClient)
			c.onWait = func(key string, waiting bool) {
				mu.Lock()
				defer mu.Unlock()
				if waiters[key] == nil {
					waiters[key] = map[*redisClient]bool{}
				}
				if waiting {
					waiters[key][c] = true
				} else {
					delete(waiters[key], c)
				}
			}
			return c
		},
	}
}

func postgresUnderTest(t testing.TB, dsn string) *peerUnderTest {
	admin, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("postgres admin connection: %v", err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	return &peerUnderTest{
		sys: NewPostgres(dsn),
		waiting: func(t testing.TB, name string) int {
			// An advisory lock's 64-bit key shows as classid (high half)
			// and objid (low half).
			var n int
			err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND NOT granted
				AND (classid::int8 << 32 | objid::int8) = hashtextextended($1, 0)`, name).Scan(&n)
			if err != nil {
				t.Fatalf("postgres pg_locks: %v", err)
			}
			return n
		},
	}
}

func etcdUnderTest(t testing.TB, endpoint string) *peerUnderTest {
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: waitLimit})
	if err != nil {
		t.Fatalf("etcd admin client: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	return &peerUnderTest{
		sys: NewEtcd(endpoint),
		// Every client in the lock's queue has a key under its prefix;
		// the holder's is one of them.
		waiting: func(t testing.TB, name string) int {
			resp, err := admin.Get(t.Context(), keyPrefix+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatalf("etcd get prefix: %v", err)
			}
			return max(int(resp.Count)-1, 0)
		},
	}
}

func zookeeperUnderTest(t testing.TB, addr string) *peerUnderTest {
	sys := NewZooKeeper(addr)
	admin := openClient(t, sys).(*zookeeperClient)
	return &peerUnderTest{
		sys: sys,
		// Every client in the queue has a child node; the holder's is one.
		waiting: func(t testing.TB, name string) int {
			children, _, err := admin.conn.Children(keyPrefix + name)
			if errors.Is(err, zk.ErrNoNode) {
				return 0
			}
			if err != nil {
				t.Fatalf("zookeeper children: %v", err)
			}
			return max(len(children)-1, 0)
		},
	}
}

// uniqueName keeps each test's lock apart from earlier runs' leftovers.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

func lockWithin(t testing.TB, c system.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	if err := c.Lock(ctx, name); err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
}

func unlockWithin(t testing.TB, c system.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	if err := c.Unlock(ctx, name); err != nil {
		t.Fatalf("unlock %s: %v", name, err)
	}
}

// waitForWaiters polls the server until n clients wait for name: the
// servers push no such event, so asking is the only way to know.
func waitForWaiters(t testing.TB, p *peerUnderTest, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for p.waiting(t, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d clients waiting for %s after %v, want %d", p.waiting(t, name), name, waitLimit, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestVersion(t *testing.T) {
	eachPeer(t, func(t *testing.T, p *peerUnderTest) {
		v, err := p.sys.Version(t.Context())
		if err != nil {
			t.Fatalf("version: %v", err)
		}
		if v == "" || v[0] < '0' || v[0] > '9' {
			t.Fatalf("version %q does not start with a number", v)
		}
		t.Logf("%s %s", p.sys.Name(), v)
	})
}

func TestMutualExclusion(t *testing.T) {
	const clients, rounds = 8, 20
	eachPeer(t, func(t *testing.T, p *peerUnderTest) {
		name := uniqueName(t)
		var inside, overlaps, entries atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for i := range clients {
			c := p.newClient(t)
			wg.Go(func() {
				for r := range rounds {
					ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
					err := c.Lock(ctx, name)
					cancel()
					if err != nil {
						errs <- fmt.Errorf("client %d round %d: %w", i, r, err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					entries.Add(1)
					time.Sleep(100 * time.Microsecond) // a moment for an intruder to show
					inside.Add(-1)
					ctx, cancel = context.WithTimeout(t.Context(), waitLimit)
					err = c.Unlock(ctx, name)
					cancel()
					if err != nil {
						errs <- fmt.Errorf("client %d round %d: %w", i, r, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := overlaps.Load(); n != 0 {
			t.Errorf("%d times two clients were inside the lock at once", n)
		}
		if n := entries.Load(); n != clients*rounds && !t.Failed() {
			t.Errorf("%d entries, want %d", n, clients*rounds)
		}
	})
}

func TestLockHonoursCancel(t *testing.T) {
	eachPeer(t, func(t *testing.T, p *peerUnderTest) {
		name := uniqueName(t)
		holder, quitter, next := p.newClient(t), p.newClient(t), p.newClient(t)
		lockWithin(t, holder, name)

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		result := make(chan error, 1)
		go func() { result <- quitter.Lock(ctx, name) }()
		waitForWaiters(t, p, name, 1)
		cancel()
		select {
		case err := <-result:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled lock returned %v, want context.Canceled", err)
			}
		case <-time.After(waitLimit):
			t.Fatalf("lock still waiting %v after its ctx was cancelled", waitLimit)
		}

		// The quitter must have left the queue: after the holder lets go,
		// a newcomer gets the lock, not the quitter.
		unlockWithin(t, holder, name)
		lockWithin(t, next, name)
		unlockWithin(t, next, name)

		// The quitter goes on as a client, except on ZooKeeper, whose
		// recipe can only be stopped by ending the session.
		if _, ok := p.sys.(*ZooKeeper); ok {
			if err := quitter.Lock(t.Context(), name); !errors.Is(err, errZooKeeperClosed) {
				t.Fatalf("lock after a cancelled one on zookeeper: %v, want errZooKeeperClosed", err)
			}
			return
		}
		lockWithin(t, quitter, name)
		unlockWithin(t, quitter, name)
	})
}

func TestLockWithEndedContext(t *testing.T) {
	eachPeer(t, func(t *testing.T, p *peerUnderTest) {
		name := uniqueName(t)
		holder, late := p.newClient(t), p.newClient(t)
		lockWithin(t, holder, name)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if err := late.Lock(ctx, name); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("lock past its deadline returned %v, want context.DeadlineExceeded", err)
		}
		unlockWithin(t, holder, name)
	})
}

func TestUnlockLetsWaiterIn(t *testing.T) {
	eachPeer(t, func(t *testing.T, p *peerUnderTest) {
		name := uniqueName(t)
		holder, waiter := p.newClient(t), p.newClient(t)
		lockWithin(t, holder, name)

		var released atomic.Bool
		result := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
			defer cancel()
			err := waiter.Lock(ctx, name)
			if err == nil && !released.Load() {
				err = errors.New("waiter got the lock while the holder still held it")
			}
			result <- err
		}()
		waitForWaiters(t, p, name, 1)
		released.Store(true)
		unlockWithin(t, holder, name)
		if err := <-result; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		unlockWithin(t, waiter, name)
	})
}

func TestCloseReleases(t *testing.T) {
	eachPeer(t, func(t *testing.T, p *peerUnderTest) {
		if _, ok := p.sys.(*Redis); ok {
			t.Skip("a Redis lock outlives its client until the lease runs out (10 s); that is Redis's nature, not tested here")
		}
		name := uniqueName(t)
		ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
		defer cancel()
		holder, err := p.sys.NewClient(ctx, 0)
		if err != nil {
			t.Fatalf("new client: %v", err)
		}
		lockWithin(t, holder, name)
		if err := holder.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		lockWithin(t, p.newClient(t), name)
	})
}

func TestUnlockNotHeld(t *testing.T) {
	eachPeer(t, func(t *testing.T, p *peerUnderTest) {
		name := uniqueName(t)
		c := p.newClient(t)
		if err := c.Unlock(t.Context(), name); err == nil {
			t.Fatal("unlock of a lock never taken succeeded")
		}
		lockWithin(t, c, name)
		if err := c.Lock(t.Context(), name+"-other"); err == nil {
			t.Fatal("a second lock on one client succeeded; clients hold one at a time")
		}
		unlockWithin(t, c, name)
		if err := c.Unlock(t.Context(), name); err == nil {
			t.Fatal("second unlock succeeded")
		}
	})
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestOpenSkipsWithAMessage(t *testing.T) {
	// etcd's client retries a refused dial until ctx ends: keep it short.
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	systems, skipped := Open(ctx, Config{})
	if len(systems) != 0 || len(skipped) != 5 {
		t.Fatalf("empty config gave %d systems and %d skips, want 0 and 5 (redis twice)", len(systems), len(skipped))
	}
	for _, err := range skipped {
		if !errors.Is(err, system.ErrUnavailable) || !strings.Contains(err.Error(), "is not set") {
			t.Errorf("skip %q: want system.ErrUnavailable and the variable's name", err)
		}
	}

	dead := closedAddr(t)
	systems, skipped = Open(ctx, Config{
		RedisAddr:    dead,
		PostgresDSN:  "postgres://nobody@" + dead + "/none?sslmode=disable&connect_timeout=2",
		EtcdEndpoint: dead,
		ZooKeeper:    dead,
	})
	if len(systems) != 0 || len(skipped) != 5 {
		t.Fatalf("dead addresses gave %d systems and %d skips, want 0 and 5 (redis twice)", len(systems), len(skipped))
	}
	for _, err := range skipped {
		if !errors.Is(err, system.ErrUnavailable) || !strings.Contains(err.Error(), dead) {
			t.Errorf("skip %q: want system.ErrUnavailable and the address %s", err, dead)
		}
		t.Log(err)
	}
}

func TestRedactDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:secret@127.0.0.1:5432/db", "postgres://u:xxxxx@127.0.0.1:5432/db"},
		{"postgres://u@127.0.0.1:5432/db", "postgres://u@127.0.0.1:5432/db"},
		{"host=127.0.0.1 password=secret user=u", "host=127.0.0.1 password=xxxxx user=u"},
		{"host=127.0.0.1 password = 'se cret' user=u", "host=127.0.0.1 password = xxxxx user=u"},
		{"127.0.0.1:16379", "127.0.0.1:16379"},
	} {
		if got := redactDSN(tc.dsn); got != tc.want {
			t.Errorf("redactDSN(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}
