package supervise

import "testing"

func TestParseStat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		stat  string
		state byte
		ppid  int
		ok    bool
	}{
		{"42 (sleep) S 7 42 42 0", 'S', 7, true},
		{"43 (a) b (c) Z 1 43", 'Z', 1, true}, // comm with spaces and parentheses
		{"44 (x", 0, 0, false},
	} {
		state, ppid, ok := parseStat([]byte(tt.stat))
		if state != tt.state || ppid != tt.ppid || ok != tt.ok {
			t.Errorf("parseStat(%q) = %q, %d, %v; want %q, %d, %v", tt.stat, state, ppid, ok, tt.state, tt.ppid, tt.ok)
		}
	}
}
