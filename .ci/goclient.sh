#!/usr/bin/env bash
# CI checks of the Go client's module, clients/go (called by .ci/run): it is
# a module of its own so that a program that imports it gets nothing of the
# server. Its go vet, for Linux and macOS; then a throwaway module that
# imports it and its fencing kits (clients/go/fence), through a replace to
# this tree, must build, and list in `go list -m all` nothing but itself,
# the client and at most golang.org/x/sys. The client's tests run in the
# README's test command (clients/clients_test.go: TestGoClient), its
# mutation gate among them (clients/go/mutations_test.go).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
client=github.com/batonlock/baton/clients/go

echo "--- the Go client's module: verify, vet (linux and darwin, and the faultinject build of its mutation gate)"
(cd clients/go && go mod verify && go vet ./... && GOOS=darwin go vet ./... && go vet -tags faultinject ./...)

echo "--- a program that imports the Go client gets nothing of the server"
consumer=$(mktemp -d)
trap 'rm -rf "$consumer"' EXIT
cat >"$consumer/go.mod" <<EOF
module example.com/consumer

go 1.26.0

require $client v0.0.0

replace $client => $root/clients/go
EOF
cat >"$consumer/main.go" <<EOF
// A program that takes a lock with the Go client.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	baton "$client"
	"$client/fence"
	"$client/wire"
)

func main() {
	c, err := baton.New([]string{"127.0.0.1:7070"}, baton.WithLease(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = c.Do(context.Background(), "jobs/nightly", func(ctx context.Context, l *baton.Lock) error {
		fmt.Println("holding", l.Name(), "with token", l.Token())
		_, err := fence.HeaderValue(l) // the fencing kits bring no driver either
		return err
	})
	var we *wire.Error
	if errors.As(err, &we) {
		fmt.Fprintln(os.Stderr, "server said", we.Code)
	}
}
EOF
(
  cd "$consumer"
  export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=mod"
  go mod tidy
  go vet .
  go build -o consumer .
  echo "go list -m all:"
  go list -m all | sed 's/^/  /'
  bad=$(go list -m all | awk -v client="$client" '$1 != "example.com/consumer" && $1 != client && $1 != "golang.org/x/sys"')
  if [ -n "$bad" ]; then
    echo "a program that imports $client also gets these modules:" >&2
    echo "$bad" >&2
    exit 1
  fi
  if [ -s go.sum ] && grep -v '^golang.org/x/sys ' go.sum; then
    echo "go.sum of a program that imports $client lists more than golang.org/x/sys (above)" >&2
    exit 1
  fi
)
echo "the Go client brings nothing but itself"
