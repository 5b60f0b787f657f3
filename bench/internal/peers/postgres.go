package peers

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/batonlock/baton/bench/internal/system"
)

// PostgreSQL session-level advisory locks: pg_advisory_lock waits in the
// server's lock manager and the holder's pg_advisory_unlock wakes the next
// waiter. The 64-bit key is the server's own hash of the name
// (hashtextextended, PostgreSQL 11+), so every client maps a name alike.
const (
	postgresLockSQL   = "SELECT pg_advisory_lock(hashtextextended($1, 0))"
	postgresUnlockSQL = "SELECT pg_advisory_unlock(hashtextextended($1, 0))"
)

// postgresCancelDeadline is how long a cancelled Lock waits for the
// server to confirm the cancel before pgx gives up on the connection.
const postgresCancelDeadline = 5 * time.Second

// Postgres is the PostgreSQL peer: one pgx.Conn (one backend) per Client.
type Postgres struct {
	dsn string
}

// NewPostgres returns the PostgreSQL peer reached with dsn.
func NewPostgres(dsn string) *Postgres { return &Postgres{dsn: dsn} }

func (p *Postgres) Name() string { return "postgres" }

func (p *Postgres) Close() error { return nil }

func (p *Postgres) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(p.dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres dsn: %w", err)
	}
	// A cancelled wait sends the server a cancel request, which ends the
	// pg_advisory_lock wait and keeps the connection usable; pgx's
	// default would break the connection by a deadline instead.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: postgresCancelDeadline}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres connect %s@%s:%d: %w", cfg.User, cfg.Host, cfg.Port, err)
	}
	return conn, nil
}

// Version asks the server: SHOW server_version.
func (p *Postgres) Version(ctx context.Context) (string, error) {
	conn, err := p.connect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", fmt.Errorf("postgres show server_version: %w", err)
	}
	return v, nil
}

// NewClient opens one connection.
func (p *Postgres) NewClient(ctx context.Context, id int) (system.Client, error) {
	conn, err := p.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres client %d: %w", id, err)
	}
	return &postgresClient{conn: conn}, nil
}

type postgresClient struct {
	conn *pgx.Conn
	held string
}

func (c *postgresClient) Lock(ctx context.Context, name string) error {
	if c.held != "" {
		return fmt.Errorf("postgres lock %q: this client already holds %q", name, c.held)
	}
	if _, err := c.conn.Exec(ctx, postgresLockSQL, name); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("postgres lock %q: %w", name, ctx.Err())
		}
		return fmt.Errorf("postgres lock %q: %w", name, err)
	}
	c.held = name
	return nil
}

func (c *postgresClient) Unlock(ctx context.Context, name string) error {
	if c.held != name {
		return fmt.Errorf("postgres unlock %q: not held by this client", name)
	}
	c.held = ""
	var released bool
	if err := c.conn.QueryRow(ctx, postgresUnlockSQL, name).Scan(&released); err != nil {
		return fmt.Errorf("postgres unlock %q: %w", name, err)
	}
	if !released {
		return fmt.Errorf("postgres unlock %q: the server says this session did not hold it", name)
	}
	return nil
}

// Close ends the backend, which releases any advisory lock it held.
func (c *postgresClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), postgresCancelDeadline)
	defer cancel()
	return c.conn.Close(ctx)
}
