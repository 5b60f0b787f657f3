//go:build !unix

package server

import "net"

func listenerOptions(uintptr, Config) error { return nil }

// presetListener reports false: each connection gets its options.
func presetListener(net.Listener, Config) bool { return false }
