package sniff

import (
	"net"
	"testing"
)

func TestLockAddrText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		advertised, bound, want string
	}{
		{"", "127.0.0.1:7070", "127.0.0.1:7070"},
		{"", "[::1]:7070", "[::1]:7070"},
		{"", "0.0.0.0:7070", "port 7070 of this host"},
		{"", "[::]:7070", "port 7070 of this host"},
		{"baton1.internal:7070", "0.0.0.0:7070", "baton1.internal:7070"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tt.bound)
		if err != nil {
			t.Fatal(err)
		}
		if got := LockAddrText(tt.advertised, addr); got != tt.want {
			t.Errorf("LockAddrText(%q, %s) = %q, want %q", tt.advertised, tt.bound, got, tt.want)
		}
	}
}
