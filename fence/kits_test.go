package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/batonlock/baton/clients/go/fence"
	"github.com/batonlock/baton/internal/resourcetest"
)

// A guarded counter, "n writer": each holder reads it and writes n+1
// with its own name. kit is one holder's way to it, fenced or not.
type kit interface {
	// begin is the holder's first access: the fence's check (when
	// fenced), then the read of the counter.
	begin(ctx context.Context, h fence.Holder) (int, error)
	// write sets the counter to n by writer.
	write(ctx context.Context, h fence.Holder, n int, writer string) error
	close()
}

// resource is the test's side of a guarded counter.
type resource interface {
	// env is what a child needs to reach it (childEnv's kit and address).
	env() []string
	// kit is a holder's way to it in this process.
	kit(t *testing.T, fenced bool) kit
	// value is the counter and its last writer.
	value(t *testing.T) (int, string)
}

func parseValue(s string) (int, string) {
	n, w, _ := strings.Cut(strings.TrimSpace(s), " ")
	v, _ := strconv.Atoi(n)
	return v, w
}

// newKit makes the kit of a child from its environment.
func newKit(kind, addr string, fenced bool) (kit, error) {
	switch kind {
	case "postgres":
		db, err := sql.Open("pgx", addr)
		if err != nil {
			return nil, err
		}
		return &pgKit{db: db, fenced: fenced}, nil
	case "redis":
		return &redisKit{rdb: redis.NewClient(&redis.Options{Addr: addr}), fenced: fenced}, nil
	case "http":
		return &httpKit{url: addr, fenced: fenced}, nil
	case "file":
		return &fileKit{path: addr, fenced: fenced}, nil
	}
	return nil, fmt.Errorf("no kit %q", kind)
}

const lockName = "fenced/counter"

// PostgreSQL: a table counter(n, writer) and a log of the accepted writes,
// each in a transaction that begins with baton_fence: one to read, one to
// write (a holder that thinks between them holds no transaction open).
type pgKit struct {
	db     *sql.DB
	fenced bool
}

func (k *pgKit) tx(ctx context.Context, h fence.Holder, f func(*sql.Tx) error) error {
	tx, err := k.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if k.fenced {
		if err := fence.Postgres(ctx, tx, h); err != nil {
			return err
		}
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func (k *pgKit) begin(ctx context.Context, h fence.Holder) (n int, err error) {
	err = k.tx(ctx, h, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "SELECT n FROM counter").Scan(&n)
	})
	return n, err
}

func (k *pgKit) write(ctx context.Context, h fence.Holder, n int, writer string) error {
	return k.tx(ctx, h, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE counter SET n = $1, writer = $2", n, writer); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO accepted (writer, token) VALUES ($1, $2::numeric)", writer, strconv.FormatUint(h.Token(), 10))
		return err
	})
}

func (k *pgKit) close() { k.db.Close() }

type pgResource struct {
	pg *resourcetest.Postgres
	db *sql.DB
}

// newPGResource makes the counter's tables on pg, afresh.
func newPGResource(t *testing.T, pg *resourcetest.Postgres, db *sql.DB) *pgResource {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		"DROP TABLE IF EXISTS counter, accepted",
		"DELETE FROM baton_fence_marks",
		"CREATE TABLE counter (n int NOT NULL, writer text NOT NULL)",
		"INSERT INTO counter VALUES (0, '')",
		"CREATE TABLE accepted (writer text NOT NULL, token numeric(20,0) NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return &pgResource{pg: pg, db: db}
}

func (r *pgResource) env() []string { return []string{"KIT=postgres", "ADDR=" + r.pg.DSN()} }
func (r *pgResource) kit(t *testing.T, fenced bool) kit {
	k, _ := newKit("postgres", r.pg.DSN(), fenced)
	t.Cleanup(k.close)
	return k
}
func (r *pgResource) value(t *testing.T) (int, string) {
	var n int
	var w string
	if err := r.db.QueryRow("SELECT n, writer FROM counter").Scan(&n, &w); err != nil {
		t.Fatal(err)
	}
	return n, w
}

// accepted is the number of writes PostgreSQL committed.
func (r *pgResource) accepted(t *testing.T) int {
	var n int
	if err := r.db.QueryRow("SELECT count(*) FROM accepted").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startPG starts a PostgreSQL server with baton_fence loaded.
func startPG(t *testing.T) (*resourcetest.Postgres, *sql.DB) {
	t.Helper()
	pg := resourcetest.StartPostgres(t)
	db := openPG(t, pg)
	if err := fence.InstallPostgres(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return pg, db
}

func openPG(t *testing.T, pg *resourcetest.Postgres) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Redis: the counter in one key, the mark in another.
type redisKit struct {
	rdb    *redis.Client
	fenced bool
}

const (
	redisMark = "{fenced/counter}:mark"
	redisData = "{fenced/counter}:data"
)

func (k *redisKit) do(ctx context.Context, args ...any) (any, error) {
	return k.rdb.Do(ctx, args...).Result()
}

func (k *redisKit) begin(ctx context.Context, h fence.Holder) (int, error) {
	if k.fenced {
		if err := fence.Redis(ctx, k.do, redisMark, h); err != nil {
			return 0, err
		}
	}
	v, err := k.rdb.Get(ctx, redisData).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	n, _ := parseValue(v)
	return n, err
}

func (k *redisKit) write(ctx context.Context, h fence.Holder, n int, writer string) error {
	v := fmt.Sprintf("%d %s", n, writer)
	if k.fenced {
		return fence.RedisSet(ctx, k.do, redisMark, h, redisData, v)
	}
	return k.rdb.Set(ctx, redisData, v, 0).Err()
}

func (k *redisKit) close() { k.rdb.Close() }

type redisResource struct {
	addr string
	rdb  *redis.Client
}

func newRedisResource(t *testing.T) *redisResource {
	t.Helper()
	rs := resourcetest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { rdb.Close() })
	return &redisResource{addr: rs.Addr, rdb: rdb}
}

func (r *redisResource) env() []string { return []string{"KIT=redis", "ADDR=" + r.addr} }
func (r *redisResource) kit(t *testing.T, fenced bool) kit {
	k, _ := newKit("redis", r.addr, fenced)
	t.Cleanup(k.close)
	return k
}
func (r *redisResource) value(t *testing.T) (int, string) {
	v, err := r.rdb.Get(context.Background(), redisData).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return parseValue(v)
}

// HTTP: a counter service behind fence.Guard; GET reads it, PUT writes
// "n writer". It counts the writes it accepted.
type httpKit struct {
	url    string
	fenced bool
}

func (k *httpKit) client(h fence.Holder) *http.Client {
	if !k.fenced {
		return http.DefaultClient
	}
	return &http.Client{Transport: &fence.Transport{Holder: h}}
}

func (k *httpKit) send(ctx context.Context, h fence.Holder, method, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, k.url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := k.client(h).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return string(b), nil
	case http.StatusConflict:
		return "", fmt.Errorf("%w: %s", fence.ErrStale, b)
	}
	return "", fmt.Errorf("%s %s: %s %s", method, k.url, resp.Status, b)
}

func (k *httpKit) begin(ctx context.Context, h fence.Holder) (int, error) {
	v, err := k.send(ctx, h, http.MethodGet, "")
	n, _ := parseValue(v)
	return n, err
}

func (k *httpKit) write(ctx context.Context, h fence.Holder, n int, writer string) error {
	_, err := k.send(ctx, h, http.MethodPut, fmt.Sprintf("%d %s", n, writer))
	return err
}

func (k *httpKit) close() {}

type httpResource struct {
	srv      *httptest.Server
	mu       sync.Mutex
	val      string
	accepted int
}

func newHTTPResource(t *testing.T, store fence.Store) *httpResource {
	t.Helper()
	r := &httpResource{val: "0 "}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.Method == http.MethodPut {
			b, _ := io.ReadAll(req.Body)
			r.val = string(b)
			r.accepted++
		}
		io.WriteString(w, r.val)
	})
	r.srv = httptest.NewServer((&fence.Guard{Store: store}).Wrap(h))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *httpResource) env() []string { return []string{"KIT=http", "ADDR=" + r.srv.URL} }
func (r *httpResource) kit(t *testing.T, fenced bool) kit {
	k, _ := newKit("http", r.srv.URL, fenced)
	return k
}
func (r *httpResource) value(t *testing.T) (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return parseValue(r.val)
}

// Files: the counter in a file, written through fence.WriteFile.
type fileKit struct {
	path   string
	fenced bool
}

func (k *fileKit) begin(ctx context.Context, h fence.Holder) (int, error) {
	if k.fenced {
		if err := fence.Check(k.path, h); err != nil {
			return 0, err
		}
	}
	b, err := os.ReadFile(k.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	n, _ := parseValue(string(b))
	return n, err
}

func (k *fileKit) write(ctx context.Context, h fence.Holder, n int, writer string) error {
	data := []byte(fmt.Sprintf("%d %s", n, writer))
	if k.fenced {
		return fence.WriteFile(k.path, data, 0o644, h)
	}
	// The same temporary file and rename, without the mark.
	tmp := k.path + ".tmp-" + writer
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, k.path)
}

func (k *fileKit) close() {}

type fileResource struct{ path string }

func newFileResource(t *testing.T) *fileResource {
	return &fileResource{path: filepath.Join(t.TempDir(), "counter")}
}

func (r *fileResource) env() []string { return []string{"KIT=file", "ADDR=" + r.path} }
func (r *fileResource) kit(t *testing.T, fenced bool) kit {
	k, _ := newKit("file", r.path, fenced)
	return k
}
func (r *fileResource) value(t *testing.T) (int, string) {
	b, err := os.ReadFile(r.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return parseValue(string(b))
}
