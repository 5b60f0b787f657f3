package peers

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonlock/baton/bench/internal/system"
)

// The way Go services take a lock on one Redis, as go-redsync/redsync v4
// (the most used Go lock library for Redis) does it by default: SET key
// random-value NX PX expiry; when taken, sleep a random 50–250 ms and try
// again (redsync.go, NewMutex: minRetryDelayMilliSec = 50,
// maxRetryDelayMilliSec = 250, expiry 8 s); release with a Lua script that
// deletes the key only if it still holds our value. Unlike redsync, which
// gives up after 32 tries (~5 s), a waiter here keeps trying until its ctx
// ends, so that long queues measure waiting, not giving up. (bsm/redislock,
// the other common one, does not retry unless the caller picks a
// strategy, LinearBackoff or ExponentialBackoff from 16 ms, so redsync's
// defaults are what a Go service gets without choosing.)
const (
	redisDefaultMinRetryDelay = 50 * time.Millisecond
	redisDefaultMaxRetryDelay = 250 * time.Millisecond
	redisDefaultLease         = 10 * time.Second
)

// redisDeleteScript deletes KEYS[1] only while it holds ARGV[1]: 1 when
// deleted, 0 when another client holds it, -1 when it has expired
// (redsync's deleteScript).
var redisDeleteScript = redis.NewScript(`
	local val = redis.call("GET", KEYS[1])
	if val == ARGV[1] then
		return redis.call("DEL", KEYS[1])
	elseif val == false then
		return -1
	else
		return 0
	end
`)

// RedisOptions tunes the Redis peer. The zero value is redsync's defaults
// with a 10 s lease.
type RedisOptions struct {
	// Name labels the system in results; "" means "redis".
	Name string
	// MinRetryDelay and MaxRetryDelay bound the random pause a waiter
	// takes after finding the key held; both zero mean redsync's 50 ms
	// and 250 ms. Equal values give a fixed delay ("redis-1ms": 1 ms).
	MinRetryDelay, MaxRetryDelay time.Duration
	// Lease is the key's expiry; 0 means 10 s.
	Lease time.Duration
}

// Redis is the Redis peer: one go-redis client with a pool of one
// connection per Client.
type Redis struct {
	addr string
	opts RedisOptions
}

// NewRedis returns the Redis peer at addr (host:port). It connects
// nothing until asked.
func NewRedis(addr string, opts RedisOptions) *Redis {
	if opts.Name == "" {
		opts.Name = "redis"
	}
	if opts.MinRetryDelay == 0 && opts.MaxRetryDelay == 0 {
		opts.MinRetryDelay, opts.MaxRetryDelay = redisDefaultMinRetryDelay, redisDefaultMaxRetryDelay
	}
	if opts.MaxRetryDelay < opts.MinRetryDelay {
		opts.MaxRetryDelay = opts.MinRetryDelay
	}
	if opts.Lease == 0 {
		opts.Lease = redisDefaultLease
	}
	return &Redis{addr: addr, opts: opts}
}

func (r *Redis) Name() string { return r.opts.Name }

func (r *Redis) Close() error { return nil }

func (r *Redis) dial() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:     r.addr,
		PoolSize: 1, // one client, one connection, as with the other peers
		// Redis 7.0 (Debian 12) predates CLIENT SETINFO.
		DisableIdentity: true,
		MaxRetries:      -1, // a lock attempt is not blindly re-sent
	})
}

// Version asks the server: INFO server's redis_version.
func (r *Redis) Version(ctx context.Context) (string, error) {
	rdb := r.dial()
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis info server at %s: %w", r.addr, err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redis info server at %s: no redis_version line", r.addr)
}

// NewClient dials one connection and checks it with PING.
func (r *Redis) NewClient(ctx context.Context, id int) (system.Client, error) {
	rdb := r.dial()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis client %d: ping %s: %w", id, r.addr, err)
	}
	return &redisClient{sys: r, rdb: rdb}, nil
}

type redisClient struct {
	sys *Redis
	rdb *redis.Client

	heldKey, heldValue string

	// onWait, when set (tests), hears when Lock first finds the key held
	// (waiting true: from then on this client waits) and when that Lock
	// returns (false).
	onWait func(key string, waiting bool)
}

func (c *redisClient) Lock(ctx context.Context, name string) error {
	if c.heldKey != "" {
		return fmt.Errorf("redis lock %q: this client already holds %q", name, c.heldKey)
	}
	key := keyPrefix + name
	value, err := redisLockValue()
	if err != nil {
		return err
	}
	waited := false
	if c.onWait != nil {
		defer func() {
			if waited {
				c.onWait(key, false)
			}
		}()
	}
	for {
		ok, err := c.rdb.SetNX(ctx, key, value, c.sys.opts.Lease).Result()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("redis lock %q: %w", name, ctx.Err())
			}
			return fmt.Errorf("redis lock %q: set nx: %w", name, err)
		}
		if ok {
			c.heldKey, c.heldValue = key, value
			return nil
		}
		if !waited && c.onWait != nil {
			c.onWait(key, true)
		}
		waited = true
		if err := sleepCtx(ctx, c.retryDelay()); err != nil {
			return fmt.Errorf("redis lock %q: %w", name, err)
		}
	}
}

func (c *redisClient) retryDelay() time.Duration {
	lo, hi := c.sys.opts.MinRetryDelay, c.sys.opts.MaxRetryDelay
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}

func (c *redisClient) Unlock(ctx context.Context, name string) error {
	key := keyPrefix + name
	if c.heldKey != key {
		return fmt.Errorf("redis unlock %q: not held by this client", name)
	}
	c.heldKey = ""
	// Run sends EVALSHA and falls back to EVAL when the script is not cached.
	n, err := redisDeleteScript.Run(ctx, c.rdb, []string{key}, c.heldValue).Int()
	if err != nil {
		return fmt.Errorf("redis unlock %q: %w", name, err)
	}
	if n != 1 {
		return fmt.Errorf("redis unlock %q: lease of %v ran out before the release (script answered %d)", name, c.sys.opts.Lease, n)
	}
	return nil
}

// Close drops the connection; a lock still held lives until its lease
// runs out, as with any Redis lock whose owner vanishes.
func (c *redisClient) Close() error { return c.rdb.Close() }

// redisLockValue is 16 random bytes in base64, as redsync's genValue.
func redisLockValue() (string, error) {
	b := make([]byte, 16)
	if _, err := cryptorand.Read(b); err != nil {
		return "", fmt.Errorf("redis lock value: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// sleepCtx pauses for d or until ctx ends, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
