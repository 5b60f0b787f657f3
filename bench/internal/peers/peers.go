// Package peers holds the lock services Baton is measured against:
// Redis, PostgreSQL advisory locks, etcd and ZooKeeper, each driven by the
// client library its community uses, the way that community takes a lock.
// bench/peers/start.sh runs their servers on 127.0.0.1.
package peers

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/batonlock/baton/bench/internal/system"
)

// Config says where each peer's server listens (empty: not started).
type Config struct {
	RedisAddr    string // host:port
	PostgresDSN  string // a pgx connection string
	EtcdEndpoint string // host:port of the client URL
	ZooKeeper    string // host:port
}

// probeTimeout bounds the question Systems asks each server before
// counting it in: long enough for a JVM that has just started, short
// enough that a dead address costs the bench little.
const probeTimeout = 5 * time.Second

// keyPrefix keeps the bench's locks apart from anything else on a server.
const keyPrefix = "/baton-bench/"

// Systems returns one System per peer that cfg names and whose server
// answers, and prints a one-line message to stderr for each peer it skips
// (not named in cfg, or not answering).
func Systems(cfg Config) []system.System {
	return SystemsLog(cfg, os.Stderr)
}

// SystemsLog is Systems writing its skip messages to w.
func SystemsLog(cfg Config, w io.Writer) []system.System {
	systems, skipped := Open(context.Background(), cfg)
	for _, err := range skipped {
		fmt.Fprintf(w, "bench: skipping %v\n", err)
	}
	return systems
}

// Open returns the peers of cfg whose servers answer Version within
// probeTimeout (or ctx), and one error wrapping system.ErrUnavailable for
// each one it leaves out, in the order redis, redis-1ms, postgres, etcd, zookeeper.
func Open(ctx context.Context, cfg Config) (systems []system.System, skipped []error) {
	candidates := []struct {
		name, variable, addr string
		open                 func(addr string) system.System
	}{
		{"redis", "BENCH_REDIS_ADDR", cfg.RedisAddr, func(a string) system.System { return NewRedis(a, RedisOptions{}) }},
		// The same lock tuned for latency: retries every millisecond, at the
		// cost of a command per waiter per millisecond.
		{"redis-1ms", "BENCH_REDIS_ADDR", cfg.RedisAddr, func(a string) system.System {
			return NewRedis(a, RedisOptions{Name: "redis-1ms", MinRetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond})
		}},
		{"postgres", "BENCH_POSTGRES_DSN", cfg.PostgresDSN, func(a string) system.System { return NewPostgres(a) }},
		{"etcd", "BENCH_ETCD_ENDPOINT", cfg.EtcdEndpoint, func(a string) system.System { return NewEtcd(a) }},
		{"zookeeper", "BENCH_ZOOKEEPER", cfg.ZooKeeper, func(a string) system.System { return NewZooKeeper(a) }},
	}
	// Probed side by side, each with its own time, so one dead address
	// does not eat the others' patience.
	answers := make([]error, len(candidates))
	opened := make([]system.System, len(candidates))
	var wg sync.WaitGroup
	for i, c := range candidates {
		if c.addr == "" {
			answers[i] = fmt.Errorf("%s: %w: %s is not set (start it with bench/peers/start.sh and source peers.env)",
				c.name, system.ErrUnavailable, c.variable)
			continue
		}
		opened[i] = c.open(c.addr)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			if _, err := opened[i].Version(ctx); err != nil {
				answers[i] = fmt.Errorf("%s: %w: no answer from %s: %v", c.name, system.ErrUnavailable, redactDSN(c.addr), err)
			}
		})
	}
	wg.Wait()
	for i, err := range answers {
		if err != nil {
			if opened[i] != nil {
				opened[i].Close()
			}
			skipped = append(skipped, err)
			continue
		}
		systems = append(systems, opened[i])
	}
	return systems, skipped
}

// redactDSN hides a password in a connection string, URL or key=value
// form, before it goes into a message.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	return passwordSetting.ReplaceAllString(dsn, "${1}xxxxx")
}

var passwordSetting = regexp.MustCompile(`(password\s*=\s*)('[^']*'|\S+)`)

// ConfigFromEnv reads the addresses that bench/peers/start.sh writes to
// its peers.env: BENCH_REDIS_ADDR, BENCH_POSTGRES_DSN,
// BENCH_ETCD_ENDPOINT, BENCH_ZOOKEEPER.
func ConfigFromEnv() Config {
	return Config{
		RedisAddr:    os.Getenv("BENCH_REDIS_ADDR"),
		PostgresDSN:  os.Getenv("BENCH_POSTGRES_DSN"),
		EtcdEndpoint: os.Getenv("BENCH_ETCD_ENDPOINT"),
		ZooKeeper:    os.Getenv("BENCH_ZOOKEEPER"),
	}
}
