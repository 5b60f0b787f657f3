package fence

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
)

// RedisDo sends one command to Redis and returns its reply, an error
// reply as an error whose text is the reply's (as go-redis and redigo
// give them). With go-redis:
//
//	do := func(ctx context.Context, args ...any) (any, error) { return rdb.Do(ctx, args...).Result() }
type RedisDo func(ctx context.Context, args ...any) (any, error)

var (
	redisFenceSHA = sha1Hex(RedisFenceLua)
	redisSetSHA   = sha1Hex(RedisFencedSetLua)
)

func sha1Hex(s string) string {
	d := sha1.Sum([]byte(s))
	return hex.EncodeToString(d[:])
}

// Redis checks and records h's token in the mark at markKey
// (fence/redis/fence.lua), by EVALSHA, loading the script with EVAL the
// first time a server lacks it. It returns a *StaleError (ErrStale) when
// a higher token has been seen. Call it when the lock is granted, before
// reading what will be written; write with RedisSet.
func Redis(ctx context.Context, do RedisDo, markKey string, h Holder) error {
	name, token, err := check(h)
	if err != nil {
		return err
	}
	return evalScript(ctx, do, name, token, RedisFenceLua, redisFenceSHA, []string{markKey}, decimal(token))
}

// RedisSet sets key to value if h's token is at least the mark at
// markKey, recording it, in one step (fence/redis/fenced_set.lua); it
// writes nothing and returns a *StaleError (ErrStale) when a higher token
// has been seen. In Redis Cluster both keys need one hash slot: a hash
// tag such as {jobs}:mark and {jobs}:data.
func RedisSet(ctx context.Context, do RedisDo, markKey string, h Holder, key, value string) error {
	name, token, err := check(h)
	if err != nil {
		return err
	}
	return evalScript(ctx, do, name, token, RedisFencedSetLua, redisSetSHA, []string{markKey, key}, decimal(token), value)
}

func evalScript(ctx context.Context, do RedisDo, name string, token uint64, script, sha string, keys []string, args ...string) error {
	if do == nil {
		return fmt.Errorf("fence: lock %q: RedisDo is nil", name)
	}
	cmd := func(verb, body string) []any {
		out := []any{verb, body, len(keys)}
		for _, k := range keys {
			out = append(out, k)
		}
		for _, a := range args {
			out = append(out, a)
		}
		return out
	}
	reply, err := do(ctx, cmd("EVALSHA", sha)...)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		reply, err = do(ctx, cmd("EVAL", script)...)
	}
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "STALE"):
		return &StaleError{Lock: name, Token: token, Err: err}
	case err != nil:
		return fmt.Errorf("fence: lock %q: redis: %w", name, err)
	}
	switch r := reply.(type) {
	case int64:
		if r == 1 {
			return nil
		}
	case int:
		if r == 1 {
			return nil
		}
	}
	return fmt.Errorf("fence: lock %q: redis answered %#v, want 1", name, reply)
}
