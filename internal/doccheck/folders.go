package doccheck

import (
	"fmt"
	"sort"
	"strings"

	"github.com/yuin/goldmark/ast"
	extast "github.com/yuin/goldmark/extension/ast"
)

// Folders checks the table under the heading named section on page f
// (README's "Where things are"): every folder it names in backquotes
// (`wire/`, `ops/ui/`) is a folder of the tree and named once, and every
// folder of the first two levels is named, as `git ls-files | cut -d/
// -f1-2` lists them. A top folder with no files of its own may instead
// have each of its folders named (internal/ by internal/cli/, ...).
func (t *Tree) Folders(f, section string) ([]Problem, error) {
	p, err := t.page(f)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return []Problem{{File: f, Line: 1, Msg: "no such page"}}, nil
	}
	var table ast.Node
	var line int
	for n := p.doc.FirstChild(); n != nil; n = n.NextSibling() {
		if h, ok := n.(*ast.Heading); ok && plainText(h, p.src) == section {
			line = p.lineOf(h)
			if next := h.NextSibling(); next != nil && next.Kind() == extast.KindTable {
				table = next
			}
			break
		}
	}
	if line == 0 {
		return []Problem{{File: f, Line: 1, Msg: fmt.Sprintf("no heading %q", section)}}, nil
	}
	if table == nil {
		return []Problem{{File: f, Line: line, Msg: fmt.Sprintf("no table right under %q", section)}}, nil
	}

	var probs []Problem
	named := map[string]bool{}
	_ = ast.Walk(table, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		c, ok := n.(*ast.CodeSpan)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		name := plainText(c, p.src)
		if !strings.HasSuffix(name, "/") {
			return ast.WalkSkipChildren, nil
		}
		dir := strings.TrimSuffix(name, "/")
		switch {
		case !t.dirs[dir]:
			probs = append(probs, Problem{File: f, Line: p.lineOf(c), Msg: fmt.Sprintf("%q names %s, which is not a folder of the repository", section, name)})
		case named[dir]:
			probs = append(probs, Problem{File: f, Line: p.lineOf(c), Msg: fmt.Sprintf("%q names %s twice: each folder once", section, name)})
		}
		named[dir] = true
		return ast.WalkSkipChildren, nil
	})

	// The folders of the first two levels, and whether a top folder holds
	// files of its own.
	top, second, ownFiles := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for file := range t.files {
		parts := strings.Split(file, "/")
		if len(parts) >= 2 {
			top[parts[0]] = true
		}
		if len(parts) == 2 {
			ownFiles[parts[0]] = true
		}
		if len(parts) >= 3 {
			second[parts[0]+"/"+parts[1]] = true
		}
	}
	var missing []string
	for d := range second {
		if !named[d] {
			missing = append(missing, d+"/")
		}
	}
	for d := range top {
		if named[d] {
			continue
		}
		if ownFiles[d] {
			missing = append(missing, d+"/")
		}
	}
	sort.Strings(missing)
	for _, d := range missing {
		probs = append(probs, Problem{File: f, Line: line, Msg: fmt.Sprintf("%q does not name %s, a folder of the repository", section, d)})
	}
	return probs, nil
}
