package netaddr

import "testing"

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7071", true},
		{"127.9.8.7:0", true},
		{"localhost:7071", true},
		{"LocalHost:7071", true},
		{"[::1]:7071", true},
		{"[::ffff:127.0.0.1]:7071", true},
		{":7071", false},
		{"0.0.0.0:7071", false},
		{"[::]:7071", false},
		{"10.1.2.3:7071", false},
		{"[fe80::1%eth0]:7071", false},
		{"example.com:7071", false},
		{"localhost.example.com:7071", false},
		{"no-port", false},
	}
	for _, tt := range tests {
		if got := IsLoopback(tt.addr); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
