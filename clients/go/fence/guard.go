package fence

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Store keeps the marks of a Guard: the highest token seen per lock.
type Store interface {
	// Enter records token as lock's mark unless a higher one was seen, in
	// which case it returns a *StaleError (ErrStale). Until the Guard
	// calls leave, once the request has been served, no other request of
	// the lock enters through this Store: the check and the handler's
	// work are one step for the requests it serves.
	Enter(ctx context.Context, lock string, token uint64) (leave func(), err error)
}

// Guard is the middleware of an HTTP service that a lock's holders
// write to: it refuses a request whose Baton-Fence token is below the
// highest it has seen for the lock with 409 Conflict and a JSON body
// {"error": "stale fencing token ...", "lock": ..., "token": ...}, and
// serves the requests of one lock one at a time, each after its check.
//
//	http.ListenAndServe(addr, (&fence.Guard{Store: fence.NewMemoryStore()}).Wrap(mux))
//
// The serving is one at a time in this process: with several replicas of
// the service, use a shared Store (PostgresStore, RedisStore) so that each
// refuses what another has seen, and see docs/fencing.md for the window
// that remains between replicas.
type Guard struct {
	// Store keeps the marks. Required.
	Store Store
	// Required answers a request without the header 428 Precondition
	// Required instead of serving it unfenced.
	Required bool
}

// Wrap returns next behind the guard.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	if g.Store == nil {
		panic("fence: Guard.Store is nil")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fences, err := ParseHeader(r.Header)
		switch {
		case errors.Is(err, errNoFence) && !g.Required:
			next.ServeHTTP(w, r)
			return
		case errors.Is(err, errNoFence):
			writeFenceError(w, http.StatusPreconditionRequired, "this service needs a "+Header+": <lock>=<token> header from the lock's holder", nil)
			return
		case err != nil:
			writeFenceError(w, http.StatusBadRequest, err.Error(), nil)
			return
		}
		// In the order of the names, so two requests with the same locks
		// cannot each wait for the other.
		slices.SortFunc(fences, func(a, b Fence) int { return strings.Compare(a.Lock, b.Lock) })
		var leaves []func()
		defer func() {
			for _, leave := range slices.Backward(leaves) {
				leave()
			}
		}()
		for _, f := range fences {
			leave, err := g.Store.Enter(r.Context(), f.Lock, f.Token)
			var stale *StaleError
			switch {
			case errors.As(err, &stale):
				writeFenceError(w, http.StatusConflict, stale.Error(), &f)
				return
			case err != nil:
				writeFenceError(w, http.StatusServiceUnavailable, fmt.Sprintf("fence: lock %q: the store of marks failed: %v", f.Lock, err), &f)
				return
			}
			leaves = append(leaves, leave)
		}
		next.ServeHTTP(w, r)
	})
}

func writeFenceError(w http.ResponseWriter, status int, msg string, f *Fence) {
	body := struct {
		Error string `json:"error"`
		Lock  string `json:"lock,omitempty"`
		Token string `json:"token,omitempty"` // decimal: exact in every JSON reader
	}{Error: msg}
	if f != nil {
		body.Lock, body.Token = f.Lock, strconv.FormatUint(f.Token, 10)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// lockSet is one in-process lock per name: it serves a name's requests
// one at a time. A name's entry lives while a request holds or waits.
type lockSet struct {
	mu    sync.Mutex
	locks map[string]*nameLock
}

type nameLock struct {
	ch    chan struct{} // a token of one: holding it is holding the name
	users int           // requests holding or waiting
}

// acquire waits for name's turn, or for ctx to end.
func (s *lockSet) acquire(ctx context.Context, name string) (release func(), err error) {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*nameLock{}
	}
	l := s.locks[name]
	if l == nil {
		l = &nameLock{ch: make(chan struct{}, 1)}
		s.locks[name] = l
	}
	l.users++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		if l.users--; l.users == 0 {
			delete(s.locks, name)
		}
		s.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// MemoryStore keeps marks in this process's memory. They are lost when
// it exits: a service that restarts accepts the first token it sees
// again, a stale one included, until the holder's next write raises the
// mark. Use a PostgresStore or RedisStore where that matters.
type MemoryStore struct {
	names lockSet
	mu    sync.Mutex
	marks map[string]uint64
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{marks: map[string]uint64{}} }

// Enter implements Store.
func (s *MemoryStore) Enter(ctx context.Context, lock string, token uint64) (func(), error) {
	release, err := s.names.acquire(ctx, lock)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	seen := s.marks[lock]
	if token >= seen {
		s.marks[lock] = token
	}
	s.mu.Unlock()
	if token < seen {
		release()
		return nil, &StaleError{Lock: lock, Token: token, Err: fmt.Errorf("stale fencing token %d: token %d was seen", token, seen)}
	}
	return release, nil
}

// PostgresStore keeps marks in PostgreSQL with baton_fence
// (InstallPostgres): each request is served inside a transaction that
// holds the mark's row lock, so the requests of one lock are served one at
// a time across every replica that shares the database.
type PostgresStore struct {
	DB *sql.DB
}

// Enter implements Store. The transaction commits when the request has
// been served, whatever the handler answered: the mark it raised stays.
func (s *PostgresStore) Enter(ctx context.Context, lock string, token uint64) (func(), error) {
	// Not the request's context: database/sql rolls a transaction back
	// when its context ends, and the raised mark must be committed.
	tx, err := s.DB.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return nil, err
	}
	if err := Postgres(ctx, tx, Static(lock, token)); err != nil {
		tx.Rollback()
		return nil, err
	}
	return func() { tx.Commit() }, nil
}

// RedisStore keeps marks in Redis with fence.lua, under Prefix + the lock
// name ("baton:fence:" when Prefix is empty). The requests of one lock are
// served one at a time in this process; every replica that shares the
// Redis refuses a token below the highest any of them has seen.
type RedisStore struct {
	Do     RedisDo
	Prefix string
	names  lockSet
}

// Enter implements Store.
func (s *RedisStore) Enter(ctx context.Context, lock string, token uint64) (func(), error) {
	release, err := s.names.acquire(ctx, lock)
	if err != nil {
		return nil, err
	}
	prefix := s.Prefix
	if prefix == "" {
		prefix = "baton:fence:"
	}
	if err := Redis(ctx, s.Do, prefix+lock, Static(lock, token)); err != nil {
		release()
		return nil, err
	}
	return release, nil
}
