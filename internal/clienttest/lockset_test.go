package clienttest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
	"github.com/batonlock/baton/internal/batontest"
)

// TestIntegrationDoAllNoDeadlock: two processes' worth of clients that
// want the same names, listed in opposite orders, take them round after
// round without deadlock (each waits in the same, sorted order), and each
// work sees every name's token as the server granted it.
func TestIntegrationDoAllNoDeadlock(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	orders := [][]string{{"acct/1", "acct/2", "acct/3"}, {"acct/3", "acct/2", "acct/1"}}
	const rounds = 20
	var wg sync.WaitGroup
	for _, names := range orders {
		c := newTestClient(t, []string{srv.Addr})
		wg.Go(func() {
			for i := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := c.DoAll(ctx, names, func(ctx context.Context, set *baton.LockSet) error {
					for _, name := range names {
						tok, ok := set.Token(name)
						lv, _ := srv.Srv.Lock(name)
						if !ok || lv.Holder == nil || lv.Holder.Token != tok {
							t.Errorf("round %d: token of %q in the set %d (%v), server's holder %+v", i, name, tok, ok, lv.Holder)
						}
					}
					return set.Err()
				})
				cancel()
				if err != nil {
					t.Errorf("round %d with %q: %v", i, names, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestIntegrationAcquireAll: all or nothing, and one context for the set,
// against the real server.
func TestIntegrationAcquireAll(t *testing.T) {
	t.Parallel()
	srv := batontest.StartServer(t)
	c := newTestClient(t, []string{srv.Addr})
	other := newTestClient(t, []string{srv.Addr})
	held := func(name string) bool {
		lv, ok := srv.Srv.Lock(name)
		return ok && lv.Holder != nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("refused inputs", func(t *testing.T) {
		for _, names := range [][]string{nil, {"a", "b", "a"}, {"a", ""}} {
			if _, err := c.AcquireAll(ctx, names); !errors.Is(err, baton.ErrBadRequest) {
				t.Errorf("AcquireAll(%q): %v, want ErrBadRequest", names, err)
			}
		}
	})

	t.Run("nothing when one is busy", func(t *testing.T) {
		acquire(t, other, "set1/b")
		_, err := c.AcquireAll(ctx, []string{"set1/b", "set1/a"}, baton.WithNoWait(true))
		if !errors.Is(err, baton.ErrBusy) || !strings.Contains(err.Error(), `"set1/b"`) {
			t.Errorf("AcquireAll with set1/b held elsewhere: %v, want ErrBusy naming set1/b", err)
		}
		batontest.Eventually(t, 5*time.Second, func() bool { return !held("set1/a") },
			"set1/a is still held after the set failed")
	})

	t.Run("the loss of one ends the set", func(t *testing.T) {
		names := []string{"set2/c", "set2/a", "set2/b"}
		set, err := c.AcquireAll(ctx, names)
		if err != nil {
			t.Fatal(err)
		}
		locks := set.Locks()
		for i, want := range []string{"set2/a", "set2/b", "set2/c"} {
			if locks[i].Name() != want || !held(want) {
				t.Fatalf("lock %d of the set is %q (held: %v), want %q, held", i, locks[i].Name(), held(want), want)
			}
		}
		if err := set.Err(); err != nil {
			t.Fatalf("Err() = %v while all are held", err)
		}
		if _, err := srv.Srv.ForceRelease("set2/b"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-set.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the set's context did not end when set2/b was lost")
		}
		err = set.Err()
		if !errors.Is(err, baton.ErrLockLost) || !errors.Is(err, baton.ErrForceReleased) || !strings.Contains(err.Error(), `"set2/b"`) {
			t.Errorf("set Err() = %v, want the loss of set2/b", err)
		}
		if err := context.Cause(locks[0].Context()); !errors.Is(err, baton.ErrForceReleased) {
			t.Errorf("set2/a's context cause %v, want the set's loss", err)
		}
		if err := set.Release(); !errors.Is(err, baton.ErrLockLost) || !strings.Contains(err.Error(), `"set2/b"`) {
			t.Errorf("Release() = %v, want the loss of set2/b", err)
		}
		batontest.Eventually(t, 5*time.Second, func() bool { return !held("set2/a") && !held("set2/c") },
			"set2/a or set2/c still held after Release")
	})

	t.Run("a loss while waiting gives up the rest", func(t *testing.T) {
		acquire(t, other, "set3/b")
		got := make(chan error, 1)
		go func() {
			set, err := c.AcquireAll(ctx, []string{"set3/a", "set3/b"})
			if set != nil {
				set.Release()
			}
			got <- err
		}()
		batontest.Eventually(t, 5*time.Second, func() bool {
			lv, _ := srv.Srv.Lock("set3/b")
			return held("set3/a") && len(lv.Waiters) == 1
		}, "the set does not hold set3/a and wait for set3/b")
		if _, err := srv.Srv.ForceRelease("set3/a"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if !errors.Is(err, baton.ErrLockLost) || !errors.Is(err, baton.ErrForceReleased) || errors.Is(err, context.Canceled) {
				t.Errorf("AcquireAll after set3/a was lost: %v, want the loss, not a cancellation", err)
			}
			if want := `acquire "set3/b": lock "set3/a" lost`; err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("AcquireAll: %v, want it to start %q", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("AcquireAll still waits for set3/b after losing set3/a")
		}
		batontest.Eventually(t, 5*time.Second, func() bool {
			lv, _ := srv.Srv.Lock("set3/b")
			return len(lv.Waiters) == 0
		}, "the set still waits in set3/b's queue")
	})

	t.Run("DoAll reports a loss, not a cancellation", func(t *testing.T) {
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- c.DoAll(ctx, []string{"set4/a", "set4/b"}, func(ctx context.Context, set *baton.LockSet) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("DoAll: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("DoAll did not start the work")
		}
		if _, err := srv.Srv.ForceRelease("set4/a"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, baton.ErrLockLost) || errors.Is(err, context.Canceled) {
				t.Errorf("DoAll: %v, want ErrLockLost, not context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("DoAll's work was not stopped by the loss")
		}
	})
}
