package doccheck

import (
	"fmt"
	"regexp"
)

// historyMarks are the words by which a page tells how it was made rather
// than what the product is: the history belongs in git, not in the docs.
var historyMarks = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`(?i)\bissues?\s+#?\d+`), "names an issue"},
	{regexp.MustCompile(`(?i)\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\s+pass(es)?\b`), "names a pass of work"},
	{regexp.MustCompile("(?i)\\bcommits?\\s+`?[0-9a-f]{7,40}\\b|`[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*`|`[0-9a-f]*[a-f][0-9a-f]*[0-9][0-9a-f]*`"), "names a commit"},
	{regexp.MustCompile(`\b\d{1,2}:\d{2}(:\d{2})?\s*UTC\b|\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z`), "gives the time of a run"},
	{regexp.MustCompile(`(?i)\bload average\b`), "gives a load average"},
	{regexp.MustCompile(`(?i)\b(before|after) this change\b|\bthis branch\b`), "tells of a change"},
}

// History reports each line of the tracked page f that tells the page's
// own history: an issue, a pass of work, a commit, the time of a run or
// the load of the machine then.
func (t *Tree) History(f string) ([]Problem, error) {
	p, err := t.page(f)
	if err != nil || p == nil {
		return nil, err
	}
	var probs []Problem
	for l := 1; l <= len(p.lines); l++ {
		s := lineText(p, l)
		for _, m := range historyMarks {
			if hit := m.re.FindString(s); hit != "" {
				probs = append(probs, Problem{File: f, Line: l, Msg: fmt.Sprintf("%s (%q): a page describes the product as it is; the history is in git", m.what, hit)})
			}
		}
	}
	return probs, nil
}
