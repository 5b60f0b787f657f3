package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/system"
)

// dflockd's semaphore (github.com/mtingers/dflockd): a line protocol where
// each request is three lines (command, key, argument) and each reply one
// line. `sl KEY "TIMEOUT LIMIT LEASE"` waits on the server, in FIFO order,
// for one of LIMIT slots and answers "ok TOKEN LEASE", or "timeout" after
// TIMEOUT seconds; `sr KEY TOKEN` gives the slot back ("ok"); a connection
// that closes gives back what it holds. Its Go client's Semaphore type
// dials a new connection for each Acquire and, on Release, sends sr and
// closes it; its low-level SemAcquire and SemRelease run on a connection
// the caller keeps. dflockd's module is not on the Go module proxy, so
// this adapter writes and reads those lines itself, as SemAcquire and
// SemRelease do.
const (
	// dflockdWaitSeconds is the timeout of one sl; a waiter whose sl
	// times out asks again, so a long queue measures waiting, not giving up.
	dflockdWaitSeconds = 60
	// dflockdLeaseSeconds is each slot's lease, as the other peers' 10 s.
	dflockdLeaseSeconds = 10
	// dflockdMaxReply bounds one reply line (dflockd's own client allows
	// 64 KiB, for the stats command's JSON).
	dflockdMaxReply = 64 << 10
)

// DflockdOptions tunes the dflockd peer.
type DflockdOptions struct {
	// Name labels the system in results; "" means "dflockd".
	Name string
	// KeepConnection keeps one connection per client for every sl and
	// sr, as dflockd's low-level SemAcquire and SemRelease allow. False
	// is its Semaphore type's way: a new connection per claim, closed
	// after the sr.
	KeepConnection bool
	// Version is the server's version, as the binary that runs it says
	// (dflockd's protocol has no command that tells it).
	Version string
}

// Dflockd is the dflockd peer, a semaphore service.
type Dflockd struct {
	addr string
	opts DflockdOptions
}

// NewDflockd returns the dflockd peer at addr (host:port). It connects
// nothing until asked.
func NewDflockd(addr string, opts DflockdOptions) *Dflockd {
	if opts.Name == "" {
		opts.Name = "dflockd"
	}
	return &Dflockd{addr: addr, opts: opts}
}

// Name implements system.Semaphores.
func (d *Dflockd) Name() string { return d.opts.Name }

// Close implements system.Semaphores.
func (d *Dflockd) Close() error { return nil }

// Version checks that the server answers the stats command, and returns
// the version the peer was given.
func (d *Dflockd) Version(ctx context.Context) (string, error) {
	c, err := dialDflockd(ctx, d.addr)
	if err != nil {
		return "", err
	}
	defer c.conn.Close()
	reply, err := c.roundTrip(ctx, "stats", "_", "")
	if err != nil {
		return "", fmt.Errorf("dflockd stats at %s: %w", d.addr, err)
	}
	if !strings.HasPrefix(reply, "ok ") {
		return "", fmt.Errorf("dflockd stats at %s: answered %q, want ok and its JSON", d.addr, clip(reply))
	}
	if d.opts.Version == "" {
		return "unknown", nil
	}
	return d.opts.Version, nil
}

// NewSlotClient implements system.Semaphores. With KeepConnection it
// dials the client's connection now.
func (d *Dflockd) NewSlotClient(ctx context.Context, id, limit int) (system.Client, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%s client %d: limit %d must be at least 1", d.opts.Name, id, limit)
	}
	c := &dflockdClient{sys: d, limit: limit}
	if d.opts.KeepConnection {
		conn, err := dialDflockd(ctx, d.addr)
		if err != nil {
			return nil, fmt.Errorf("%s client %d: %w", d.opts.Name, id, err)
		}
		c.conn = conn
	}
	return c, nil
}

// dflockdConn is one connection and its reader.
type dflockdConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialDflockd(ctx context.Context, addr string) (*dflockdConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dflockd dial %s: %w", addr, err)
	}
	return &dflockdConn{conn: conn, r: bufio.NewReaderSize(conn, 4096)}, nil
}

// roundTrip sends one request and reads its reply line. When ctx ends
// first, the blocked read is cut by a deadline in the past and the error
// is ctx's; the connection is then of no further use.
func (c *dflockdConn) roundTrip(ctx context.Context, cmd, key, arg string) (string, error) {
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.conn.Write([]byte(cmd + "\n" + key + "\n" + arg + "\n")); err != nil {
		return "", ctxErr(ctx, err)
	}
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		if len(line)+len(chunk) > dflockdMaxReply {
			return "", fmt.Errorf("reply longer than %d bytes", dflockdMaxReply)
		}
		line = append(line, chunk...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return "", ctxErr(ctx, err)
		}
	}
	return strings.TrimRight(string(line), "\r\n"), nil
}

// ctxErr is ctx's error once ctx has ended (the deadline that cut the
// I/O was ours), else err.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

type dflockdClient struct {
	sys   *Dflockd
	limit int
	conn  *dflockdConn // nil between claims unless KeepConnection

	heldKey, token string
}

func (c *dflockdClient) Lock(ctx context.Context, name string) error {
	if c.heldKey != "" {
		return fmt.Errorf("dflockd sl %q: this client already holds %q", name, c.heldKey)
	}
	key := keyPrefix + name
	if c.conn == nil {
		conn, err := dialDflockd(ctx, c.sys.addr)
		if err != nil {
			return fmt.Errorf("dflockd sl %q: %w", name, err)
		}
		c.conn = conn
	}
	arg := fmt.Sprintf("%d %d %d", dflockdWaitSeconds, c.limit, dflockdLeaseSeconds)
	for {
		reply, err := c.conn.roundTrip(ctx, "sl", key, arg)
		if err != nil {
			// A waiter cut off may yet be granted: only the close, which
			// releases what the connection holds, leaves nothing behind.
			c.drop()
			return fmt.Errorf("dflockd sl %q: %w", name, err)
		}
		if reply == "timeout" {
			continue
		}
		token, err := parseSemGrant(reply)
		if err != nil {
			c.drop()
			return fmt.Errorf("dflockd sl %q limit %d: %w", name, c.limit, err)
		}
		c.heldKey, c.token = key, token
		return nil
	}
}

// parseSemGrant reads sl's answer "ok TOKEN LEASE".
func parseSemGrant(reply string) (token string, err error) {
	f := strings.Fields(reply)
	if len(f) == 3 && f[0] == "ok" {
		if _, err := strconv.Atoi(f[2]); err == nil {
			return f[1], nil
		}
	}
	if reply == "error_limit_mismatch" {
		return "", errors.New("the server holds this key with another limit (error_limit_mismatch)")
	}
	return "", fmt.Errorf("server answered %q, want \"ok TOKEN LEASE\"", clip(reply))
}

func (c *dflockdClient) Unlock(ctx context.Context, name string) error {
	key := keyPrefix + name
	if c.heldKey != key {
		return fmt.Errorf("dflockd sr %q: not held by this client", name)
	}
	c.heldKey = ""
	reply, err := c.conn.roundTrip(ctx, "sr", key, c.token)
	if err != nil || !c.sys.opts.KeepConnection {
		c.drop()
	}
	switch {
	case err != nil:
		return fmt.Errorf("dflockd sr %q: %w", name, err)
	case reply != "ok":
		return fmt.Errorf("dflockd sr %q: server answered %q, want ok (the lease of %d s ran out?)", name, clip(reply), dflockdLeaseSeconds)
	}
	return nil
}

// drop closes the connection, which gives back whatever it holds.
func (c *dflockdClient) drop() {
	if c.conn != nil {
		c.conn.conn.Close()
		c.conn = nil
	}
}

// Close ends the client; the server gives back a slot still held.
func (c *dflockdClient) Close() error {
	c.heldKey = ""
	c.drop()
	return nil
}

// clip shortens a reply for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
