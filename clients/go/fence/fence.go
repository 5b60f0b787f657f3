// Package fence makes the resource a lock guards refuse a stale holder:
// one whose lock has moved on while it was paused, cut off or slow, and
// which still writes. Each kit keeps a high-water mark per lock name at
// the resource, and refuses a token below it in the same atomic step as
// the write:
//
//   - PostgreSQL: Postgres calls baton_fence (fence/postgres/baton_fence.sql
//     in the Baton repository, or InstallPostgres) as the first statement of
//     a transaction.
//   - Redis: Redis and RedisSet run fence/redis's Lua scripts by SHA.
//   - HTTP: Transport stamps a Baton-Fence header on every request; Guard
//     is the middleware of the service that checks it.
//   - Files: WriteFile writes a file through a temporary file and a rename
//     that a stale holder's token never reaches.
//
// The package uses only the standard library: the PostgreSQL and Redis
// kits run through the caller's own client (database/sql with any driver,
// and a func that sends one Redis command), so a program gets no driver
// it does not already have.
//
// A kit fences a mutex: one holder at a time, so the highest token is the
// only one that can be live. A semaphore's holders (a shared claim with a
// limit above 1, readers included) are all live with different tokens,
// and a mark per name would refuse the live ones granted earlier: the kits
// refuse such a Holder with ErrShared, and docs/fencing.md shows the
// per-record pattern for them.
//
// Refuse a token from the first access of a holder on, reads included:
// call the kit when the lock is granted (or in the transaction that reads
// what will be written), not only at the final write. A stale holder that
// read before the newer one and writes after it is then refused.
package fence

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
)

// Holder is what a fence needs of a lock. *baton.Lock is one; Static
// makes one of a name and a token received some other way (BATON_TOKEN).
type Holder interface {
	Name() string
	Token() uint64
}

// shared is what a Holder that may be a shared claim also tells
// (*baton.Lock does).
type shared interface {
	Shared() bool
	Limit() int
}

// Static is the Holder of lock name with token.
func Static(name string, token uint64) Holder { return static{name, token} }

type static struct {
	name  string
	token uint64
}

func (s static) Name() string  { return s.name }
func (s static) Token() uint64 { return s.token }

var (
	// ErrStale: the resource has seen a higher token for the lock, so the
	// holder has lost it and nothing was written. The work must stop.
	ErrStale = errors.New("stale fencing token")
	// ErrShared: the Holder is a shared claim with a limit above 1, which
	// a mark per name cannot fence (see the package doc).
	ErrShared = errors.New("a shared claim cannot be fenced by a mark per name")
)

// StaleError is the refusal of a stale token, matching ErrStale. Err is
// the resource's own error, when it sent one.
type StaleError struct {
	Lock  string
	Token uint64
	Err   error
}

func (e *StaleError) Error() string {
	if e.Err != nil { // the resource's message says it all
		return fmt.Sprintf("fence: lock %q: %v", e.Lock, e.Err)
	}
	return fmt.Sprintf("fence: lock %q: stale fencing token %d", e.Lock, e.Token)
}

// Unwrap gives ErrStale and the resource's error.
func (e *StaleError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrStale}
	}
	return []error{ErrStale, e.Err}
}

// check refuses what no kit can fence: a shared claim with a limit above
// 1, token 0 (never granted) and an empty name.
func check(h Holder) (name string, token uint64, err error) {
	if h == nil {
		return "", 0, errors.New("fence: Holder is nil")
	}
	name, token = h.Name(), h.Token()
	if s, ok := h.(shared); ok && s.Shared() && s.Limit() > 1 {
		return name, token, fmt.Errorf("fence: lock %q is a shared claim with limit %d: its holders' tokens are all current, "+
			"and a mark per name would refuse the live ones granted earlier; fence per record with each holder's token (docs/fencing.md): %w",
			name, s.Limit(), ErrShared)
	}
	switch {
	case name == "":
		return name, token, errors.New("fence: the lock name is empty")
	case token == 0:
		return name, token, fmt.Errorf("fence: lock %q: token 0 is never granted", name)
	}
	return name, token, nil
}

// decimal is a token in decimal, as every kit sends it: a double would
// round it past 2^53, an int64 overflow it past 2^63.
func decimal(t uint64) string { return strconv.FormatUint(t, 10) }

// escapeName writes a lock name for a header or a file: its bytes
// outside RFC 3986's unreserved characters and "/" are percent-encoded,
// so no name can break the "name=token" syntax or a header line.
func escapeName(name string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/':
			b = append(b, c)
		default:
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

func unescapeName(s string) (string, error) { return url.PathUnescape(s) }
