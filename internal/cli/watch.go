package cli

import (
	"context"
	"flag"

	"github.com/batonlock/baton/internal/watch"
)

func watchCommand() *command {
	return &command{
		name:    "watch",
		summary: "print lock events as they happen",
		usage:   "baton watch [flags] [NAME]",
		flags:   func() *flag.FlagSet { return newAdminFlags("watch", new(adminOptions)) },
		help: `Follows the server's event stream (GET /v1/events) until interrupted: one
line per event - time, type (queued, granted, released, expired,
force_released, kicked, left; resumed and superseded for claims of
protocol version 3, a resumed line with the epoch its token or ticket
came from and the session it replaces), lock, owner, session, and the fencing token
of a holder. With NAME, only that lock's events. -json prints each EVENT as
one line of JSON, for scripts.

A dropped stream is resumed where it stopped (Last-Event-ID), so no event is
lost or repeated. If the server no longer holds the missed events (or it
restarted), a line on stderr says so: re-read 'baton locks'. A cluster
electing a leader (503) is waited for the same way.

` + adminHelp + `
Examples:
  baton watch
  baton watch jobs/nightly
  baton watch -json | jq -c 'select(.type == "expired")'
`,
		run: runWatch,
	}
}

func runWatch(ctx context.Context, s *sys, c *command, args []string) int {
	o, name, ops, code, ok := parseAdmin(s, c, args, "lock name", true)
	if !ok {
		return code
	}
	err := watch.Follow(ctx, ops, name, watch.Output{Stdout: s.stdout, Stderr: s.stderr, JSON: o.json})
	if err != nil {
		return adminFailed(s, c.name, err)
	}
	return exitOK
}
