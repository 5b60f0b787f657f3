package scenario

import (
	"testing"
	"time"
)

// TestRollingCheck: the rolling scenario's checker counts two beliefs of
// one name at once (also one that outlasts several later grants) and a
// token that does not rise, and nothing in a clean hand-over.
func TestRollingCheck(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name             string
		bs               []belief
		overlaps, tokens int
	}{
		{"clean", []belief{{token: 1, granted: at(0), gone: at(10)}, {token: 2, granted: at(11), gone: at(20)}, {token: 5, granted: at(20), gone: at(30)}}, 0, 0},
		{"granted before the release's send", []belief{{token: 1, granted: at(0), gone: at(10)}, {token: 2, granted: at(9), gone: at(20)}}, 1, 0},
		{"one belief outlasts two grants", []belief{{token: 1, granted: at(0), gone: at(100)}, {token: 2, granted: at(10), gone: at(20)}, {token: 3, granted: at(30), gone: at(40)}}, 2, 0},
		{"a token falls", []belief{{token: 7, granted: at(0), gone: at(10)}, {token: 6, granted: at(11), gone: at(20)}}, 0, 1},
		{"a token repeats", []belief{{token: 7, granted: at(0), gone: at(10)}, {token: 7, granted: at(11), gone: at(20)}}, 0, 1},
	} {
		var res RollingResult
		var problems []string
		res.check("x", c.bs, func(f string, a ...any) { problems = append(problems, f) })
		if res.Overlaps != c.overlaps || res.TokensFell != c.tokens || res.Grants != len(c.bs) {
			t.Errorf("%s: %d overlaps, %d tokens not rising, %d grants; want %d, %d, %d", c.name, res.Overlaps, res.TokensFell, res.Grants, c.overlaps, c.tokens, len(c.bs))
		}
		if (c.overlaps+c.tokens > 0) != (len(problems) > 0) {
			t.Errorf("%s: problems %v", c.name, problems)
		}
	}
}
