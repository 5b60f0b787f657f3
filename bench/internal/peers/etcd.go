package peers

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonlock/baton/bench/internal/system"
)

// etcd's own lock recipe: a concurrency.Session (a lease kept alive by the
// client) and concurrency.Mutex, which puts a key under the lock's prefix
// and waits for the key with the next lower revision to go.
const (
	etcdSessionTTL  = 10 // seconds, the lease of each session
	etcdDialTimeout = 5 * time.Second
)

// Etcd is the etcd peer: one clientv3.Client and one Session per Client.
type Etcd struct {
	endpoint string
}

// NewEtcd returns the etcd peer whose client URL is at endpoint (host:port).
func NewEtcd(endpoint string) *Etcd { return &Etcd{endpoint: endpoint} }

func (e *Etcd) Name() string { return "etcd" }

func (e *Etcd) Close() error { return nil }

func (e *Etcd) dial(ctx context.Context) (*clientv3.Client, error) {
	timeout := etcdDialTimeout
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < timeout {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.endpoint},
		DialTimeout: timeout, // with a timeout, New waits for the connection
		Context:     context.Background(),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd dial %s: %w", e.endpoint, err)
	}
	return cli, nil
}

// Version asks the server: the Status API's version.
func (e *Etcd) Version(ctx context.Context) (string, error) {
	cli, err := e.dial(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	st, err := cli.Status(ctx, e.endpoint)
	if err != nil {
		return "", fmt.Errorf("etcd status %s: %w", e.endpoint, err)
	}
	return st.Version, nil
}

// NewClient dials one client and grants its session's lease.
func (e *Etcd) NewClient(ctx context.Context, id int) (system.Client, error) {
	cli, err := e.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd client %d: %w", id, err)
	}
	// The session lives with the client, not with ctx: its lease must be
	// kept alive after NewClient returns.
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(etcdSessionTTL))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd client %d: session: %w", id, err)
	}
	return &etcdClient{cli: cli, session: session}, nil
}

type etcdClient struct {
	cli     *clientv3.Client
	session *concurrency.Session
	held    *concurrency.Mutex
	name    string
}

func (c *etcdClient) Lock(ctx context.Context, name string) error {
	if c.held != nil {
		return fmt.Errorf("etcd lock %q: this client already holds %q", name, c.name)
	}
	m := concurrency.NewMutex(c.session, keyPrefix+name)
	// On ctx's end Mutex.Lock deletes its own waiting key before returning.
	if err := m.Lock(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("etcd lock %q: %w", name, ctx.Err())
		}
		return fmt.Errorf("etcd lock %q: %w", name, err)
	}
	c.held, c.name = m, name
	return nil
}

func (c *etcdClient) Unlock(ctx context.Context, name string) error {
	if c.held == nil || c.name != name {
		return fmt.Errorf("etcd unlock %q: not held by this client", name)
	}
	m := c.held
	c.held, c.name = nil, ""
	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("etcd unlock %q: %w", name, err)
	}
	return nil
}

// Close revokes the session's lease (deleting any key it holds) and
// closes the client.
func (c *etcdClient) Close() error {
	serr := c.session.Close()
	cerr := c.cli.Close()
	if serr != nil {
		return fmt.Errorf("etcd close session: %w", serr)
	}
	if cerr != nil {
		return fmt.Errorf("etcd close client: %w", cerr)
	}
	return nil
}
