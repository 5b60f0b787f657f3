package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/fence"
)

// fenceTx runs baton_fence for token in a transaction of its own and
// commits it; it returns baton_fence's error.
func fenceTx(t *testing.T, db *sql.DB, name string, token uint64) error {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := fence.Postgres(context.Background(), tx, fence.Static(name, token)); err != nil {
		return err
	}
	return tx.Commit()
}

// TestPostgresFence: baton_fence keeps every bit (neighbours past 2^53
// and at the top of the counter are told apart), refuses a lower token
// with an error starting "stale fencing token", accepts an equal one, and
// refuses what is not a token.
func TestPostgresFence(t *testing.T) {
	_, db := startPG(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		token uint64
		stale bool
	}{
		{"a", 1<<53 + 4, false},
		{"a", 1<<53 + 5, false},
		{"a", 1<<53 + 4, true}, // as doubles, 2^53+5 rounds to 2^53+4
		{"a", 1<<53 + 5, false},
		{"top", 1<<64 - 2, false},
		{"top", 1<<64 - 1, false},
		{"top", 1<<64 - 2, true},
		{"top", 1<<63 + 1, true}, // an int64 takes it for a negative number
		{"b", 1<<63 + 1, false},  // names are apart
	} {
		err := fenceTx(t, db, c.name, c.token)
		if c.stale != errors.Is(err, fence.ErrStale) || (!c.stale && err != nil) {
			t.Fatalf("%s token %d: %v, want stale=%v", c.name, c.token, err, c.stale)
		}
		if c.stale && !strings.Contains(err.Error(), "stale fencing token") {
			t.Fatalf("%s token %d: %v, want the message to say stale fencing token", c.name, c.token, err)
		}
	}
	var mark string
	if err := db.QueryRow("SELECT token::text FROM baton_fence_marks WHERE name = 'top'").Scan(&mark); err != nil || mark != "18446744073709551615" {
		t.Fatalf("the mark of top: %q, %v; want 18446744073709551615", mark, err)
	}
	// The message, as PostgreSQL raises it.
	_, err := db.ExecContext(ctx, "SELECT baton_fence('top', 5)")
	if err == nil || !strings.Contains(err.Error(), `ERROR: stale fencing token 5 for lock "top": token 18446744073709551615 was seen`) {
		t.Fatalf("a stale token in SQL: %v", err)
	}
	for _, bad := range []string{"0", "18446744073709551616", "1.5", "-3", "NULL"} {
		_, err := db.ExecContext(ctx, "SELECT baton_fence('c', "+bad+")")
		if err == nil || !strings.Contains(err.Error(), "baton_fence:") {
			t.Errorf("baton_fence('c', %s): %v, want its refusal", bad, err)
		}
	}
	// Loading the file again keeps the marks.
	if err := fence.InstallPostgres(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := fenceTx(t, db, "top", 1<<64-2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("after a second install: %v, want the mark kept", err)
	}
}

// TestPostgresStaleWriterWaitsThenFails: baton_fence keeps the mark's row
// locked until the transaction ends, so a stale transaction that races a
// newer one waits for it and then fails; a newer one that comes while a
// stale one is open waits and then proceeds.
func TestPostgresStaleWriterWaitsThenFails(t *testing.T) {
	_, db := startPG(t)
	ctx := context.Background()
	newer, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Rollback()
	if err := fence.Postgres(ctx, newer, fence.Static("jobs", 20)); err != nil {
		t.Fatal(err)
	}
	stale := make(chan error, 1)
	go func() { stale <- fenceTx(t, db, "jobs", 10) }()
	select {
	case err := <-stale:
		t.Fatalf("the stale transaction did not wait for the newer one: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := newer.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stale:
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("the stale transaction after the newer one's commit: %v, want ErrStale", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stale transaction still waits 10s after the newer one's commit")
	}

	// The other way round: the newer writer waits for the older one's
	// transaction, then proceeds.
	older, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback()
	if err := fence.Postgres(ctx, older, fence.Static("jobs", 20)); err != nil {
		t.Fatal(err)
	}
	later := make(chan error, 1)
	go func() { later <- fenceTx(t, db, "jobs", 30) }()
	select {
	case err := <-later:
		t.Fatalf("the newer transaction did not wait: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	older.Commit()
	if err := <-later; err != nil {
		t.Fatalf("the newer transaction: %v", err)
	}
}

// TestPostgresFirstWriters: writers of a name nobody has fenced yet race
// to insert its mark; each gets an answer, and the mark is the highest.
func TestPostgresFirstWriters(t *testing.T) {
	_, db := startPG(t)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() { errs <- fenceTx(t, db, "fresh", uint64(100+i)) }()
	}
	stale := 0
	for range 8 {
		switch err := <-errs; {
		case errors.Is(err, fence.ErrStale):
			stale++
		case err != nil:
			t.Fatalf("a first writer: %v", err)
		}
	}
	var mark int
	if err := db.QueryRow("SELECT token FROM baton_fence_marks WHERE name = 'fresh'").Scan(&mark); err != nil || mark != 107 {
		t.Fatalf("the mark: %d, %v; want 107", mark, err)
	}
	t.Logf("%d of 8 first writers came after a higher one", stale)
}

// TestPostgresMissingFunction: a database without baton_fence gets an
// error that says what to load.
func TestPostgresMissingFunction(t *testing.T) {
	_, db := startPG(t)
	if _, err := db.Exec("DROP FUNCTION baton_fence(text, numeric)"); err != nil {
		t.Fatal(err)
	}
	err := fenceTx(t, db, "jobs", 1)
	if err == nil || !strings.Contains(err.Error(), "load fence/postgres/baton_fence.sql") {
		t.Fatalf("got %v, want the hint to load baton_fence.sql", err)
	}
}
