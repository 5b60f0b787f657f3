// Package peers holds the lock services Baton is measured against:
// Redis, PostgreSQL advisory locks, etcd and ZooKeeper.
package peers

import (
	"os"

	"github.com/batonlock/baton/bench/internal/system"
)

// Config says where each peer's server listens (empty: not started).
type Config struct {
	RedisAddr    string // host:port
	PostgresDSN  string // a pgx connection string
	EtcdEndpoint string // host:port of the client URL
	ZooKeeper    string // host:port
}

// Systems returns the peers that cfg names; peer adapters are added here.
func Systems(cfg Config) []system.System { return nil }

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
