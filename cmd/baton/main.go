// Command baton is Baton's one binary: the lock server and the tools that
// talk to it. See 'baton help'.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/batonlock/baton/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, give the signals back to their default action
	// so that a second one ends the process at once, mid-shutdown.
	context.AfterFunc(ctx, stop)
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
