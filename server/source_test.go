package server_test

import (
	"net/netip"
	"testing"

	"github.com/batonlock/baton/server"
)

// TestSourcePrefixes: by default an IPv6 /64 is one source for the caps
// and rates kept per address (one host has a whole /64, so counted per
// address no cap would hold), an IPv4 address is one, and an IPv4-mapped
// IPv6 address is its IPv4 address.
func TestSourcePrefixes(t *testing.T) {
	p := server.DefaultConfig().SourcePrefixes
	key := func(s string) netip.Prefix { return p.Key(netip.MustParseAddr(s)) }
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{"2001:db8:1::1", "2001:db8:1::ffff:2", true},
		{"2001:db8:1:0:aaaa::1", "2001:db8:1:0:bbbb::1", true},
		{"2001:db8:1::1", "2001:db8:2::1", false},
		{"192.0.2.1", "192.0.2.2", false},
		{"::ffff:192.0.2.1", "192.0.2.1", true},
	} {
		if got := key(tt.a) == key(tt.b); got != tt.same {
			t.Errorf("%s and %s one source: %v, want %v (keys %v, %v)", tt.a, tt.b, got, tt.same, key(tt.a), key(tt.b))
		}
	}
	if err := (server.SourcePrefixes{V4: 33}).Validate(); err == nil {
		t.Error("ipv4-prefix 33 accepted")
	}
}
