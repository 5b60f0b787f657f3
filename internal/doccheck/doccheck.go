// Package doccheck checks the repository's Markdown as GitHub renders it:
// every relative link and anchor resolves to a tracked file and a heading
// in it, no page names a .md file the repository does not have, every
// heading renders, and README's "Where things are" matches the folders.
// The comments of the source files are held to the same names: a comment
// that sends its reader to a page must name one the repository has.
// Its test runs the checks over the repository, so `go test ./...` and CI
// keep the docs honest.
package doccheck

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// A Problem is one thing on one line of one page that does not hold.
type Problem struct {
	File string // slash-separated, relative to the tree's root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// A Tree is what the checks see of a repository: its root and its tracked
// files. A link must resolve to one of those files, or to a folder that
// holds some, since an untracked file is not on GitHub.
type Tree struct {
	Root  string
	files map[string]bool
	dirs  map[string]bool
	pages map[string]*page
}

// NewTree is the tree at root holding files (slash-separated paths
// relative to root).
func NewTree(root string, files []string) *Tree {
	t := &Tree{Root: root, files: map[string]bool{}, dirs: map[string]bool{}, pages: map[string]*page{}}
	for _, f := range files {
		t.files[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			t.dirs[d] = true
		}
	}
	return t
}

// Tracked is the git work tree that holds dir, with the files git tracks
// (`git ls-files`).
func Tracked(dir string) (*Tree, error) {
	top, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return nil, fmt.Errorf("git rev-parse --show-toplevel in %s: %w", dir, err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return NewTree(root, files), nil
}

// Pages are the tracked Markdown files, sorted.
func (t *Tree) Pages() []string {
	var md []string
	for f := range t.files {
		if strings.HasSuffix(f, ".md") {
			md = append(md, f)
		}
	}
	sort.Strings(md)
	return md
}

// page is one parsed Markdown file.
type page struct {
	src     []byte
	doc     ast.Node
	lines   []int           // offset of each line's first byte
	anchors map[string]bool // GitHub's ids of its headings, and HTML ids and names
}

var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

// page parses the tracked file f once. A tracked file missing from the
// work tree (deleted, not yet committed) is nil: nothing to check in it.
func (t *Tree) page(f string) (*page, error) {
	if p, ok := t.pages[f]; ok {
		return p, nil
	}
	src, err := os.ReadFile(path.Join(t.Root, f))
	if os.IsNotExist(err) {
		t.pages[f] = nil
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := &page{src: src, doc: markdown.Parser().Parse(text.NewReader(src)), lines: []int{0}, anchors: map[string]bool{}}
	for i, c := range src {
		if c == '\n' {
			p.lines = append(p.lines, i+1)
		}
	}
	seen := map[string]int{}
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			// GitHub numbers a repeated id: x, x-1, x-2.
			id := Slug(plainText(n, src))
			if k := seen[id]; k > 0 {
				seen[id] = k + 1
				id = fmt.Sprintf("%s-%d", id, k)
			} else {
				seen[id] = 1
			}
			p.anchors[id] = true
		case *ast.HTMLBlock, *ast.RawHTML:
			for _, m := range htmlID.FindAllSubmatch(rawHTML(n, src), -1) {
				p.anchors[string(m[2])] = true
			}
		}
		return ast.WalkContinue, nil
	})
	t.pages[f] = p
	return p, nil
}

// line is the 1-based line of offset off.
func (p *page) line(off int) int {
	return sort.Search(len(p.lines), func(i int) bool { return p.lines[i] > off })
}

// lineOf is the line where n starts: its own position, else its first
// text's, else its parent's.
func (p *page) lineOf(n ast.Node) int {
	for m := n; m != nil; m = m.Parent() {
		if pos := m.Pos(); pos >= 0 {
			return p.line(pos)
		}
		if b, ok := m.(interface{ Lines() *text.Segments }); ok && m.Type() == ast.TypeBlock && b.Lines().Len() > 0 {
			return p.line(b.Lines().At(0).Start)
		}
	}
	return 1
}

// Slug is the anchor GitHub gives a heading: lower case, each space a
// '-', every character dropped that is not a letter, a digit, a mark, '-'
// or '_'.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// plainText is the text a reader sees of n: its words, code and link
// texts, without the Markdown around them.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.AutoLink:
			b.Write(c.Label(src))
		case *ast.RawHTML, *ast.Image:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

func rawHTML(n ast.Node, src []byte) []byte {
	switch n := n.(type) {
	case *ast.RawHTML:
		return n.Segments.Value(src)
	case *ast.HTMLBlock:
		var b bytes.Buffer
		for i := range n.Lines().Len() {
			seg := n.Lines().At(i)
			b.Write(seg.Value(src))
		}
		return b.Bytes()
	}
	return nil
}

var (
	htmlID   = regexp.MustCompile(`\b(id|name)\s*=\s*"([^"]*)"`)
	htmlLink = regexp.MustCompile(`\b(href|src)\s*=\s*"([^"]*)"`)
	// mdName is a file name ending in .md, with the folders before it.
	mdName = regexp.MustCompile(`[A-Za-z0-9_.\-/]*[A-Za-z0-9_\-]\.md\b`)
	scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.\-]*:`)
)

// Check runs the page checks over every tracked .md file: relative links
// and anchors resolve, .md names in the prose are files of the tree, and
// headings render.
func (t *Tree) Check() ([]Problem, error) {
	var all []Problem
	for _, f := range t.Pages() {
		ps, err := t.CheckPage(f)
		if err != nil {
			return nil, err
		}
		all = append(all, ps...)
	}
	return all, nil
}

// CheckPage runs the page checks over the tracked file f.
func (t *Tree) CheckPage(f string) ([]Problem, error) {
	p, err := t.page(f)
	if err != nil || p == nil {
		return nil, err
	}
	var probs []Problem
	add := func(n ast.Node, format string, args ...any) {
		probs = append(probs, Problem{File: f, Line: p.lineOf(n), Msg: fmt.Sprintf(format, args...)})
	}
	var walkErr error
	link := func(n ast.Node, dest string) {
		msg, err := t.resolve(f, dest)
		if err != nil {
			walkErr = err
		}
		if msg != "" {
			add(n, "link %q: %s", dest, msg)
		}
	}
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Link:
			link(n, string(n.Destination))
		case *ast.Image:
			link(n, string(n.Destination))
		case *ast.HTMLBlock, *ast.RawHTML:
			for _, m := range htmlLink.FindAllSubmatch(rawHTML(n, p.src), -1) {
				link(n, string(m[2]))
			}
		case *ast.Heading:
			if n.Lines().Len() == 0 {
				break
			}
			if l := p.line(n.Lines().At(0).Start); l > 1 && isATX(p, l) && !blankOrHeading(p, l-1) {
				add(n, "heading %q right after a paragraph: put a blank line before it, or it may render as text", plainText(n, p.src))
			}
		case *ast.Text:
			t.checkNames(f, n.Segment.Value(p.src), func(format string, args ...any) { add(n, format, args...) })
		}
		return ast.WalkContinue, nil
	})
	return probs, walkErr
}

// lineText is line l (1-based) of p, without its newline.
func lineText(p *page, l int) string {
	start := p.lines[l-1]
	end := len(p.src)
	if l < len(p.lines) {
		end = p.lines[l] - 1
	}
	return strings.TrimRight(string(p.src[start:end]), "\r")
}

func isATX(p *page, l int) bool {
	return strings.HasPrefix(strings.TrimLeft(lineText(p, l), " "), "#")
}

func blankOrHeading(p *page, l int) bool {
	s := strings.TrimSpace(lineText(p, l))
	return s == "" || strings.HasPrefix(s, "#")
}

// checkNames reports every name of a .md file in s that is neither beside
// page f nor at the root: a page must not send its reader to a file the
// repository does not have.
func (t *Tree) checkNames(f string, s []byte, report func(string, ...any)) {
	for _, m := range mdName.FindAll(s, -1) {
		name := strings.TrimPrefix(string(m), "./")
		if t.files[path.Join(path.Dir(f), name)] || t.files[strings.TrimPrefix(name, "/")] {
			continue
		}
		report("names %s, which is not a file of the repository", name)
	}
}

// resolve says what is wrong with link dest on page f, or "" when it
// resolves (or is not relative: another site's pages are not checked).
func (t *Tree) resolve(f, dest string) (string, error) {
	if dest == "" {
		return "empty link", nil
	}
	if scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return "", nil
	}
	target, frag, _ := strings.Cut(dest, "#")
	target, _, _ = strings.Cut(target, "?")
	target, err := url.PathUnescape(target)
	if err != nil {
		return fmt.Sprintf("cannot decode: %v", err), nil
	}
	switch {
	case target == "":
		target = f
	case strings.HasPrefix(target, "/"):
		target = path.Clean(strings.TrimPrefix(target, "/"))
	default:
		target = path.Join(path.Dir(f), target)
	}
	if target == ".." || strings.HasPrefix(target, "../") {
		return "points outside the repository", nil
	}
	if target != "." && !t.files[target] && !t.dirs[target] {
		if _, err := os.Stat(path.Join(t.Root, target)); err == nil {
			return fmt.Sprintf("%s is not tracked by git, so it is not on GitHub", target), nil
		}
		return fmt.Sprintf("no file %s", target), nil
	}
	if frag == "" || !strings.HasSuffix(target, ".md") {
		return "", nil // a folder, or a line of a source file: GitHub's own anchors
	}
	p, err := t.page(target)
	if err != nil || p == nil {
		return "", err
	}
	if !p.anchors[frag] {
		return fmt.Sprintf("%s has no heading with the anchor #%s%s", target, frag, nearest(frag, p.anchors)), nil
	}
	return "", nil
}

// nearest suggests the anchor closest to frag, to make a broken link
// quick to mend.
func nearest(frag string, anchors map[string]bool) string {
	best, bestScore := "", 0
	for a := range anchors {
		score := 0
		for i := 0; i < len(a) && i < len(frag) && a[i] == frag[i]; i++ {
			score++
		}
		if score > bestScore || score == bestScore && a < best {
			best, bestScore = a, score
		}
	}
	if bestScore < 3 {
		return ""
	}
	return " (did you mean #" + best + "?)"
}
