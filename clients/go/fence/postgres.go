package fence

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Execer runs one SQL statement: *sql.Tx and *sql.Conn are Execers.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Postgres fences a PostgreSQL transaction: call it on tx as the first
// statement, before the transaction reads what it will write. It calls
// baton_fence (fence/postgres/baton_fence.sql, or InstallPostgres), which
// records h's token as the lock's mark, or fails with a *StaleError
// (ErrStale) when a higher token has been seen; the transaction is then
// aborted, and must be rolled back. The mark's row stays locked until tx
// ends, so a stale writer that races a newer one waits for it and then
// fails. The query uses $1 placeholders (pgx, lib/pq).
func Postgres(ctx context.Context, tx Execer, h Holder) error {
	name, token, err := check(h)
	if err != nil {
		return err
	}
	// The token goes as text: database/sql refuses a uint64 past 2^63.
	_, err = tx.ExecContext(ctx, "SELECT baton_fence($1, $2::numeric)", name, decimal(token))
	return postgresError(name, token, err)
}

// postgresError turns baton_fence's refusal into a *StaleError.
func postgresError(name string, token uint64, err error) error {
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "stale fencing token"):
		return &StaleError{Lock: name, Token: token, Err: err}
	case strings.Contains(err.Error(), "baton_fence") && strings.Contains(err.Error(), "does not exist"):
		return fmt.Errorf("fence: lock %q: %w (load fence/postgres/baton_fence.sql into the database, or call fence.InstallPostgres)", name, err)
	default:
		return fmt.Errorf("fence: lock %q: baton_fence: %w", name, err)
	}
}

// InstallPostgres loads baton_fence.sql, the table of marks and the
// function, into the database; it keeps every mark that exists.
func InstallPostgres(ctx context.Context, db Execer) error {
	if _, err := db.ExecContext(ctx, PostgresSQL); err != nil {
		return fmt.Errorf("fence: install baton_fence: %w", err)
	}
	return nil
}
