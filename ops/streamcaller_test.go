package ops

import (
	"net/http/httptest"
	"testing"

	"github.com/batonlock/baton/server"
)

// TestStreamCallerIPv6Prefix: without a certificate, the callers of one
// IPv6 /64 are one caller for the event streams' limit per caller (one
// host owns the whole /64); IPv4 addresses stay apart.
func TestStreamCallerIPv6Prefix(t *testing.T) {
	key := func(remote string) string {
		r := httptest.NewRequest("GET", "/v1/events", nil)
		r.RemoteAddr = remote
		k, _ := streamCaller(r, server.DefaultSourcePrefixes())
		return k
	}
	if a, b := key("[2001:db8:1::1]:5000"), key("[2001:db8:1::ffff:2]:5001"); a != b {
		t.Errorf("two addresses of one /64: callers %q and %q, want one", a, b)
	}
	if a, b := key("192.0.2.1:5000"), key("192.0.2.2:5000"); a == b {
		t.Errorf("two IPv4 addresses: one caller %q, want two", a)
	}
}
