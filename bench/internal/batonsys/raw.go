package batonsys

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/batonlock/baton/bench/internal/rawwire"
	"github.com/batonlock/baton/bench/internal/system"
	"github.com/batonlock/baton/clients/go/wire"
)

// RawSystem is Baton spoken in raw frames by the caller's own goroutine:
// no reader goroutine, no heartbeat loop, no channel between them. Beside
// System it shows how much of a figure is the server and how much the Go
// client. Its sessions never heartbeat, so a claim must end within the
// lease (one minute).
type RawSystem struct {
	name, addr string
	rst        bool
}

// NewRawSystem measures srv without the Go client.
func NewRawSystem(srv *Server) *RawSystem { return &RawSystem{name: "baton-wire", addr: srv.Addr} }

// NewRawSystemAt speaks raw frames to any server of Baton's protocol at
// addr (the floor lock server too), under the label name. With rst, a
// release is a reset (SO_LINGER 0, then close): the client keeps no
// TIME_WAIT, and the server reads ECONNRESET instead of EOF.
func NewRawSystemAt(name, addr string, rst bool) *RawSystem {
	return &RawSystem{name: name, addr: addr, rst: rst}
}

// Name implements system.System.
func (s *RawSystem) Name() string { return s.name }

// Version implements system.System.
func (s *RawSystem) Version(context.Context) (string, error) {
	return "the same server, raw frames from the bench", nil
}

// NewClient implements system.System.
func (s *RawSystem) NewClient(_ context.Context, id int) (system.Client, error) {
	return &rawClient{addr: s.addr, owner: fmt.Sprintf("bench-wire-%d", id), rst: s.rst}, nil
}

// Close implements system.System.
func (s *RawSystem) Close() error { return nil }

type rawClient struct {
	addr, owner string
	rst         bool
	held        *rawwire.Conn
	name        string
}

const rawLease = time.Minute

func (c *rawClient) Lock(ctx context.Context, name string) error {
	if c.held != nil {
		return fmt.Errorf("lock %q: this client already holds %q", name, c.name)
	}
	conn, err := rawwire.Dial(ctx, c.addr, nil)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	if err := conn.Acquire(name, rawLease, c.owner); err != nil {
		conn.Close()
		return err
	}
	for {
		f, err := conn.ReadFrame()
		if err != nil {
			conn.Close()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		switch {
		case f.Err != nil:
			conn.Close()
			return f.Err
		case f.Type == wire.TypeAcquired:
			c.held, c.name = conn, name
			return nil
		}
		// WAITING: read on for the push.
	}
}

func (c *rawClient) Unlock(_ context.Context, name string) error {
	if c.held == nil || c.name != name {
		return fmt.Errorf("unlock %q: not held by this client", name)
	}
	err := c.release()
	c.held = nil
	return err
}

// release closes the held connection, with a reset if c.rst.
func (c *rawClient) release() error {
	if tc, ok := c.held.Conn.(*net.TCPConn); ok && c.rst {
		tc.SetLinger(0)
	}
	return c.held.Close()
}

func (c *rawClient) Close() error {
	if c.held == nil {
		return nil
	}
	err := c.held.Close()
	c.held = nil
	return err
}
