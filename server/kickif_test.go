package server_test

import (
	"errors"
	"testing"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// TestKickIf: the check runs with the waiter's lock, and its refusal
// leaves the waiter in place; an unknown session never reaches the check.
func TestKickIf(t *testing.T) {
	ts := batontest.StartServer(t)
	hold(t, ts, "k", longLease)
	queue(t, ts, "k", longLease, 1)
	lv, _ := ts.Srv.Lock("k")
	id := lv.Waiters[0].ID
	errNo := errors.New("no")
	var asked []string
	refuse := func(lock string) error { asked = append(asked, lock); return errNo }
	if _, err := ts.Srv.KickIf(id, refuse); err != errNo {
		t.Fatalf("refused kick: got %v, want the check's error", err)
	}
	if len(asked) != 1 || asked[0] != "k" {
		t.Fatalf("check asked about %q, want [k]", asked)
	}
	if lv, _ := ts.Srv.Lock("k"); len(lv.Waiters) != 1 {
		t.Fatalf("%d waiters after a refused kick, want 1", len(lv.Waiters))
	}
	if _, err := ts.Srv.KickIf("999", refuse); !errors.Is(err, server.ErrUnknownSession) || len(asked) != 1 {
		t.Fatalf("unknown session: got %v after %d checks, want ErrUnknownSession and no check", err, len(asked))
	}
	if sv, err := ts.Srv.KickIf(id, func(string) error { return nil }); err != nil || sv.ID != id {
		t.Fatalf("allowed kick: got %+v, %v", sv, err)
	}
}
