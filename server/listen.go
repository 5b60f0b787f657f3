package server

import (
	"context"
	"net"
	"syscall"
)

// ListenConfig returns how to open a listener for the server with cfg:
// accepted connections get no TCP keepalive (a session's lease finds a
// dead peer, and keepalive would cost four setsockopt per accept for
// nothing), and the socket options that the kernel copies from a listener
// to the connections it accepts are set once, on the listener (see
// listenerOptions).
func ListenConfig(cfg Config) net.ListenConfig {
	return net.ListenConfig{
		KeepAlive: -1,
		Control: func(network, address string, c syscall.RawConn) error {
			var err error
			if cerr := c.Control(func(fd uintptr) { err = listenerOptions(fd, cfg) }); cerr != nil {
				return cerr
			}
			return err
		},
	}
}

// Listen opens a TCP listener on addr with ListenConfig(cfg).
func Listen(ctx context.Context, cfg Config, addr string) (net.Listener, error) {
	lc := ListenConfig(cfg)
	return lc.Listen(ctx, "tcp", addr)
}
