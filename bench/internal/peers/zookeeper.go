package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonlock/baton/bench/internal/system"
)

// ZooKeeper's standard lock recipe as go-zookeeper ships it (zk.Lock): an
// ephemeral sequential node under the lock's path; the lowest holds it and
// every other waits on a watch of the node just below its own.
const (
	zookeeperSessionTimeout = 10 * time.Second
	zookeeperFLWTimeout     = 3 * time.Second // bounds the srvr question
)

// ZooKeeper is the ZooKeeper peer: one zk.Conn (one session) per Client.
type ZooKeeper struct {
	addr string
}

// NewZooKeeper returns the ZooKeeper peer at addr (host:port).
func NewZooKeeper(addr string) *ZooKeeper { return &ZooKeeper{addr: addr} }

func (z *ZooKeeper) Name() string { return "zookeeper" }

func (z *ZooKeeper) Close() error { return nil }

// Version asks the server with the srvr four-letter word (start.sh
// allows srvr in zoo.cfg's 4lw.commands.whitelist). go-zookeeper's
// FLWSrvr does not parse ZooKeeper 3.8's answer, so this reads the first
// line itself: "Zookeeper version: 3.8.0-debian--1, built on ...".
func (z *ZooKeeper) Version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, zookeeperFLWTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", z.addr)
	if err != nil {
		return "", fmt.Errorf("zookeeper srvr: %w", err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "", fmt.Errorf("zookeeper srvr to %s: %w", z.addr, err)
	}
	answer, err := io.ReadAll(io.LimitReader(conn, 4096))
	if err != nil {
		return "", fmt.Errorf("zookeeper srvr from %s: %w", z.addr, err)
	}
	first, _, _ := strings.Cut(string(answer), "\n")
	v, ok := strings.CutPrefix(first, "Zookeeper version: ")
	if !ok {
		return "", fmt.Errorf("zookeeper srvr from %s: unexpected answer %q (is srvr in 4lw.commands.whitelist?)", z.addr, first)
	}
	v, _, _ = strings.Cut(v, ",")
	// Debian's build leaves Maven's commit placeholder in: "3.8.0-${mvngit.commit.id}".
	v, _, _ = strings.Cut(v, "-${")
	return v, nil
}

// NewClient opens one session and waits until the server has granted it.
func (z *ZooKeeper) NewClient(ctx context.Context, id int) (system.Client, error) {
	conn, events, err := zk.Connect([]string{z.addr}, zookeeperSessionTimeout, zk.WithLogger(quietLogger{}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper client %d: connect %s: %w", id, z.addr, err)
	}
	// The event channel drops what nobody reads, so after the session is
	// up it can be left alone.
	for {
		select {
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("zookeeper client %d: session with %s: %w", id, z.addr, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return nil, fmt.Errorf("zookeeper client %d: connection to %s closed before a session", id, z.addr)
			}
			if ev.State == zk.StateHasSession {
				return &zookeeperClient{conn: conn}, nil
			}
			if ev.State == zk.StateAuthFailed || ev.State == zk.StateExpired {
				conn.Close()
				return nil, fmt.Errorf("zookeeper client %d: session with %s: %v", id, z.addr, ev.State)
			}
		}
	}
}

type zookeeperClient struct {
	conn   *zk.Conn
	held   *zk.Lock
	name   string
	closed bool // by a cancelled Lock
}

// errZooKeeperClosed tells a caller that this client's session ended
// because a Lock was cancelled.
var errZooKeeperClosed = errors.New("zookeeper client closed by a cancelled lock")

// Lock runs zk.Lock, which takes no ctx. When ctx ends first, Lock closes
// the session: ZooKeeper then deletes the waiting node, which also lets
// the recipe's Lock return (with zk.ErrClosing or ErrConnectionClosed), and
// this client is done: later calls fail with errZooKeeperClosed.
func (c *zookeeperClient) Lock(ctx context.Context, name string) error {
	if c.held != nil {
		return fmt.Errorf("zookeeper lock %q: this client already holds %q", name, c.name)
	}
	if c.closed {
		return fmt.Errorf("zookeeper lock %q: %w", name, errZooKeeperClosed)
	}
	l := zk.NewLock(c.conn, keyPrefix+name, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("zookeeper lock %q: %w", name, err)
		}
		c.held, c.name = l, name
		return nil
	case <-ctx.Done():
		c.closed = true
		c.conn.Close()
		<-done // the recipe returns once the connection is gone
		return fmt.Errorf("zookeeper lock %q: %w", name, ctx.Err())
	}
}

func (c *zookeeperClient) Unlock(ctx context.Context, name string) error {
	if c.held == nil || c.name != name {
		return fmt.Errorf("zookeeper unlock %q: not held by this client", name)
	}
	l := c.held
	c.held, c.name = nil, ""
	if err := l.Unlock(); err != nil {
		return fmt.Errorf("zookeeper unlock %q: %w", name, err)
	}
	return nil
}

// Close ends the session; ZooKeeper deletes its ephemeral nodes, held
// lock included.
func (c *zookeeperClient) Close() error {
	c.conn.Close()
	return nil
}

// quietLogger drops go-zookeeper's chatter ("connected to", "authenticated").
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}
