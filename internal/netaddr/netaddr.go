// Package netaddr holds the one rule for whether a host:port names this
// machine, shared by the CLI's flag checks and the ops API's forwarding.
package netaddr

import (
	"net"
	"net/netip"
	"strings"
)

// IsLoopback reports whether the address addr (host:port) can only be
// reached from this machine: its host is localhost or a loopback IP. An
// empty host, 0.0.0.0 and :: listen everywhere; other names are not
// resolved, so they count as reachable from outside.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
