package floor

import (
	"context"
	"testing"
	"time"

	baton "github.com/batonlock/baton/clients/go"
)

// TestGoClient: the Go client, heartbeats and all, holds and hands over
// a lock on the floor server as it does on Baton's.
func TestGoClient(t *testing.T) {
	addr := serve(t, NewLockServer().Serve)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A short lease: the client heartbeats every ~250 ms, so the hold
	// below sees several heartbeats answered. Not shorter: a client that
	// misses its confirmation window (0.8 of the lease) on a loaded
	// machine gives the lock up, as it must.
	a, err := baton.New([]string{addr}, baton.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := baton.New([]string{addr}, baton.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	la, err := a.Acquire(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *baton.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "jobs")
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	// Held across several heartbeats, and still held.
	hold := time.NewTimer(1500 * time.Millisecond)
	defer hold.Stop()
	select {
	case <-la.Done():
		t.Fatalf("lock lost while held: %v", la.Err())
	case l := <-got:
		l.Release()
		t.Fatal("the waiter got the lock while it was held")
	case err := <-errc:
		t.Fatal(err)
	case <-hold.C:
	}
	if err := la.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb.Token() <= la.Token() {
			t.Errorf("token %d after %d", lb.Token(), la.Token())
		}
		lb.Release()
	case err := <-errc:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the waiter never got the lock")
	}
}
