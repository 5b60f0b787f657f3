package batonsys

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/system"
	baton "github.com/batonlock/baton/clients/go"
)

// System is Baton through its Go client: each Lock is baton.Acquire on a
// new connection, each Unlock is Lock.Release (the close).
type System struct {
	name, addr string
	bin        string
	lease      time.Duration
	opts       []baton.Option
}

// NewSystem measures the server srv with clients holding leases of lease.
func NewSystem(srv *Server, bin string, lease time.Duration) *System {
	return &System{name: "baton", addr: srv.Addr, bin: bin, lease: lease}
}

// NewSystemAt is the Go client against the server at addr, labelled name,
// with opts for every client beyond the lease and the owner (for example
// baton.WithNormalClose). Its Version is not known.
func NewSystemAt(name, addr string, lease time.Duration, opts ...baton.Option) *System {
	return &System{name: name, addr: addr, lease: lease, opts: opts}
}

// Name implements system.System.
func (s *System) Name() string { return s.name }

// AddOptions gives every client made from now on opts too.
func (s *System) AddOptions(opts ...baton.Option) { s.opts = append(s.opts, opts...) }

// Version is `baton version` plus the repository's commit.
func (s *System) Version(ctx context.Context) (string, error) {
	if s.bin == "" {
		return "", fmt.Errorf("%s: no binary to ask", s.name)
	}
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
	opts := append([]baton.Option{baton.WithLease(s.lease), baton.WithOwner(fmt.Sprintf("bench-%d", id))}, s.opts...)
	c, err := baton.New([]string{s.addr}, opts...)
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
