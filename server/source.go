package server

import (
	"fmt"
	"net"
	"net/netip"
)

// Source prefixes: what counts as one address for the caps and rates kept
// per address (connections per address, handshakes per address, the ops
// listener's places and requests per address).
//
// An IPv6 host is given a whole /64 (SLAAC, privacy addresses, a cloud
// instance's delegated prefix), so one host can speak from as many
// addresses as it likes: counted per address, no cap would hold. An IPv4
// address is scarce, and what shares a /24 is usually many hosts (a data
// centre's subnet, a Kubernetes node's pods, an office), so IPv4 is
// counted per address by default.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// SourcePrefixes says how many leading bits of a source address make one
// source. The zero value counts every address apart.
type SourcePrefixes struct {
	V4 int // 1 to 32; 0 means 32
	V6 int // 1 to 128; 0 means 128
}

// DefaultSourcePrefixes are the prefixes of baton serve: IPv4 addresses
// apart, IPv6 by /64.
func DefaultSourcePrefixes() SourcePrefixes {
	return SourcePrefixes{V4: DefaultIPv4Prefix, V6: DefaultIPv6Prefix}
}

// Validate reports a prefix length out of range, naming the flag.
func (p SourcePrefixes) Validate() error {
	switch {
	case p.V4 < 0 || p.V4 > 32:
		return fmt.Errorf("ipv4-prefix (%d) must be between 1 and 32", p.V4)
	case p.V6 < 0 || p.V6 > 128:
		return fmt.Errorf("ipv6-prefix (%d) must be between 1 and 128", p.V6)
	}
	return nil
}

// Key is the source that addr belongs to: its prefix. An IPv4-mapped IPv6
// address is its IPv4 address; a zone is dropped. The invalid address is
// the zero Prefix.
func (p SourcePrefixes) Key(addr netip.Addr) netip.Prefix {
	if !addr.IsValid() {
		return netip.Prefix{}
	}
	addr = addr.Unmap().WithZone("")
	bits := p.V6
	if addr.Is4() {
		bits = p.V4
	}
	if bits <= 0 || bits > addr.BitLen() {
		bits = addr.BitLen()
	}
	k, _ := addr.Prefix(bits)
	return k
}

// KeyOf is Key for the remote address of a connection; the zero Prefix
// when it is not an IP address (a test pipe, a Unix socket).
func (p SourcePrefixes) KeyOf(a net.Addr) netip.Prefix {
	return p.Key(AddrOf(a))
}

// AddrOf is the IP address of a, unmapped, without a zone; the invalid
// address when a is not an IP address.
func AddrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap().WithZone("")
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap().WithZone("")
}

// Text shows a source: its address alone when the prefix is the whole
// address.
func sourceText(k netip.Prefix) string {
	if k.IsSingleIP() {
		return k.Addr().String()
	}
	return k.String()
}
