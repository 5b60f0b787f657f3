package baton_test

import (
	"context"
	"errors"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// TestObserveAndLeader: a client that never campaigns sees who leads an
// election (Leader) and each new leader as it comes (Observe), from the
// real server's ops API.
func TestObserveAndLeader(t *testing.T) {
	if _, err := buildServer(); err != nil {
		t.Skipf("SKIPPED: no server to run: %v", err)
	}
	addr, opsAddr, stop := exampleServerOps()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watcher, err := baton.New([]string{addr}, baton.WithOpsAddrs(opsAddr))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watcher.Leader(ctx, "election/web"); !errors.Is(err, baton.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	candidate := func(value string) *baton.Client {
		c, err := baton.New([]string{addr}, baton.WithLease(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, err := candidate("a").Campaign(ctx, "election/web", "node-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	leaders, err := watcher.Observe(ctx, "election/web")
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) baton.Leader {
		t.Helper()
		select {
		case l, ok := <-leaders:
			if !ok || l.Value != want || l.Token == 0 {
				t.Fatalf("Observe gave %+v (open %v), want leader %q with its token", l, ok, want)
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("Observe gave nothing within 10s, want leader %q", want)
		}
		return baton.Leader{}
	}
	first := next("node-a:8080")
	if first.Token != a.Token() {
		t.Errorf("Observe's first leader has token %d, the leadership %d", first.Token, a.Token())
	}
	bDone := make(chan *baton.Leadership, 1)
	go func() {
		b, err := candidate("b").Campaign(ctx, "election/web", "node-b:8080")
		if err != nil {
			t.Error(err)
		}
		bDone <- b
	}()
	time.Sleep(200 * time.Millisecond) // b waits behind a
	a.Resign()
	second := next("node-b:8080")
	if second.Token <= first.Token {
		t.Errorf("the second leader's token %d is not above the first's %d", second.Token, first.Token)
	}
	b := <-bDone
	if l, err := watcher.Leader(ctx, "election/web"); err != nil || l != second {
		t.Errorf("Leader: %+v, %v; want %+v", l, err, second)
	}
	b.Resign()
	cancel()
	for range leaders { // closed once ctx ends
	}
	if _, err := (func() (<-chan baton.Leader, error) {
		c, _ := baton.New([]string{addr})
		return c.Observe(context.Background(), "election/web")
	})(); !errors.Is(err, baton.ErrBadRequest) {
		t.Errorf("Observe without WithOpsAddrs: %v, want ErrBadRequest", err)
	}
}
