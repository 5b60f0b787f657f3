package batonsys

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/bench/internal/system"
)

// System is Baton through its Go client: each Lock is baton.Acquire on a
// new connection, each Unlock is Lock.Release (the close).
type System struct {
	srv     *Server
	bin     string
	lease   time.Duration
	version string
}

// NewSystem measures the server srv with clients holding leases of lease.
func NewSystem(srv *Server, bin string, lease time.Duration) *System {
	return &System{srv: srv, bin: bin, lease: lease}
}

// Name implements system.System.
func (s *System) Name() string { return "baton" }

// Version is `baton version` plus the repository's commit.
func (s *System) Version(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, s.bin, "version").Output()
	if err != nil {
		return "", fmt.Errorf("baton version: %w", err)
	}
	v := strings.TrimSpace(string(out))
	if rev, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		v += " (commit " + strings.TrimSpace(string(rev)) + ")"
	}
	return v, nil
}

// NewClient implements system.System.
func (s *System) NewClient(_ context.Context, id int) (system.Client, error) {
	c, err := baton.New([]string{s.srv.Addr}, baton.WithLease(s.lease), baton.WithOwner(fmt.Sprintf("bench-%d", id)))
	if err != nil {
		return nil, err
	}
	return &client{c: c}, nil
}

// Close implements system.System; the server is stopped by its owner.
func (s *System) Close() error { return nil }

type client struct {
	c    *baton.Client
	held *baton.Lock
}

func (c *client) Lock(ctx context.Context, name string) error {
	if c.held != nil {
		return fmt.Errorf("lock %q: this client already holds %q", name, c.held.Name())
	}
	l, err := c.c.Acquire(ctx, name)
	if err != nil {
		return err
	}
	c.held = l
	return nil
}

func (c *client) Unlock(_ context.Context, name string) error {
	if c.held == nil || c.held.Name() != name {
		return fmt.Errorf("unlock %q: not held by this client", name)
	}
	l := c.held
	c.held = nil
	return l.Release()
}

func (c *client) Close() error {
	if c.held == nil {
		return nil
	}
	err := c.held.Release()
	c.held = nil
	if errors.Is(err, baton.ErrLockLost) {
		return nil // it is closed either way
	}
	return err
}
