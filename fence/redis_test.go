package fence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/batonlock/baton/clients/go/fence"
)

func redisDo(rdb *redis.Client) fence.RedisDo {
	return func(ctx context.Context, args ...any) (any, error) { return rdb.Do(ctx, args...).Result() }
}

// TestRedisFence: fence.lua keeps every bit (neighbours past 2^53 and at
// the top of the counter are told apart), answers 1 or an error starting
// with STALE, stores the mark as 20 digits, and refuses what is not a
// token; fenced_set.lua writes only for a token that is not stale.
func TestRedisFence(t *testing.T) {
	rdb := newRedisResource(t).rdb
	do := redisDo(rdb)
	ctx := context.Background()
	for _, c := range []struct {
		mark  string
		token uint64
		stale bool
	}{
		{"m:a", 1<<53 + 4, false},
		{"m:a", 1<<53 + 5, false},
		{"m:a", 1<<53 + 4, true}, // as doubles, 2^53+5 rounds to 2^53+4
		{"m:a", 1<<53 + 5, false},
		{"m:top", 1<<64 - 2, false},
		{"m:top", 1<<64 - 1, false},
		{"m:top", 1<<64 - 2, true},
		{"m:top", 9, true},        // fewer digits: padded, not compared as text
		{"m:b", 1<<63 + 1, false}, // marks are apart
	} {
		err := fence.Redis(ctx, do, c.mark, fence.Static("jobs", c.token))
		if c.stale != errors.Is(err, fence.ErrStale) || (!c.stale && err != nil) {
			t.Fatalf("%s token %d: %v, want stale=%v", c.mark, c.token, err, c.stale)
		}
	}
	if got, _ := rdb.Get(ctx, "m:a").Result(); got != "00009007199254740997" {
		t.Fatalf("the mark m:a holds %q, want 20 digits", got)
	}
	// The script's own answers, by EVAL.
	reply, err := rdb.Eval(ctx, fence.RedisFenceLua, []string{"m:top"}, "18446744073709551615").Result()
	if err != nil || reply != int64(1) {
		t.Fatalf("EVAL with the mark's token: %v, %v; want 1", reply, err)
	}
	_, err = rdb.Eval(ctx, fence.RedisFenceLua, []string{"m:top"}, "5").Result()
	if err == nil || err.Error() != "STALE fencing token 5 for m:top: token 18446744073709551615 was seen" {
		t.Fatalf("EVAL with a stale token: %v", err)
	}
	for _, bad := range []string{"0", "000", "18446744073709551616", "99999999999999999999", "1.5", "-3", "+3", "", "123456789012345678901", "1e3"} {
		_, err := rdb.Eval(ctx, fence.RedisFenceLua, []string{"m:c"}, bad).Result()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR baton fence: token") {
			t.Errorf("token %q: %v, want the script's refusal", bad, err)
		}
	}
	rdb.Set(ctx, "m:junk", "12", 0)
	if err := fence.Redis(ctx, do, "m:junk", fence.Static("jobs", 5)); err == nil || !strings.Contains(err.Error(), "not a mark of 20 digits") {
		t.Errorf("a key that is not a mark: %v", err)
	}
	if _, err := rdb.Eval(ctx, fence.RedisFenceLua, []string{"m:a", "x"}, "5").Result(); err == nil || !strings.Contains(err.Error(), "takes 1 key") {
		t.Errorf("two keys: %v", err)
	}

	// The fenced write.
	set := func(token uint64, v string) error {
		return fence.RedisSet(ctx, do, "{s}:mark", fence.Static("jobs", token), "{s}:data", v)
	}
	if err := set(1<<63+2, "new"); err != nil {
		t.Fatal(err)
	}
	if err := set(1<<63+1, "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale fenced write: %v, want ErrStale", err)
	}
	if got, _ := rdb.Get(ctx, "{s}:data").Result(); got != "new" {
		t.Fatalf("the data after a stale write: %q, want new", got)
	}
}

// TestRedisLoadsByEvalOnce: the helpers send EVALSHA, and EVAL only when
// the server lacks the script (a restart, SCRIPT FLUSH).
func TestRedisLoadsByEvalOnce(t *testing.T) {
	rdb := newRedisResource(t).rdb
	ctx := context.Background()
	var verbs []string
	do := func(ctx context.Context, args ...any) (any, error) {
		verbs = append(verbs, args[0].(string))
		return rdb.Do(ctx, args...).Result()
	}
	for range 2 {
		if err := fence.Redis(ctx, do, "m", fence.Static("jobs", 7)); err != nil {
			t.Fatal(err)
		}
	}
	rdb.ScriptFlush(ctx)
	if err := fence.Redis(ctx, do, "m", fence.Static("jobs", 8)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(verbs, " "); got != "EVALSHA EVAL EVALSHA EVALSHA EVAL" {
		t.Fatalf("commands sent: %s, want EVALSHA EVAL EVALSHA EVALSHA EVAL", got)
	}
}

// TestRedisNumericCompareIsUnsafe is the control of TestRedisFence: the
// same script comparing tokens as Lua numbers (doubles) accepts the stale
// token that TestRedisFence sees refused, so its tokens tell the two apart.
func TestRedisNumericCompareIsUnsafe(t *testing.T) {
	rdb := newRedisResource(t).rdb
	ctx := context.Background()
	numeric := strings.Replace(fence.RedisFenceLua, "if above(seen, token) then", "if tonumber(seen) > tonumber(token) then", 1)
	if numeric == fence.RedisFenceLua {
		t.Fatal("the script's comparison was not found")
	}
	for _, tok := range []uint64{1<<53 + 5, 1<<53 + 4} {
		if _, err := rdb.Eval(ctx, numeric, []string{"m"}, strconv.FormatUint(tok, 10)).Result(); err != nil {
			t.Fatalf("numeric compare, token %d: %v", tok, err)
		}
	}
	t.Log("compared as doubles, token 2^53+4 passed a mark of 2^53+5")
}
