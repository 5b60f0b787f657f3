package doccheck

import (
	"bytes"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
)

// A comment is the text of one comment of a source file and the line it
// starts on.
type comment struct {
	line int
	text string
}

// commentsOf is the reader of comments for each kind of source file, by
// the file's ending; sourceKind picks one for a file.
var commentsOf = map[string]func(src []byte) []comment{
	".go":  goComments,
	".py":  pythonComments,
	".ts":  cComments,
	".mts": cComments,
	".js":  cComments,
	".mjs": cComments,
	".cjs": cComments,
	".sh":  shellComments,
}

// sourceKind is the comment reader of file f with contents src, or nil
// when f is not a source file the check reads: by its ending, or for a
// script without one by its #! line.
func sourceKind(f string, src []byte) func([]byte) []comment {
	if read := commentsOf[path.Ext(f)]; read != nil {
		return read
	}
	if path.Ext(f) == "" && strings.HasPrefix(string(src), "#!") {
		first, _, _ := strings.Cut(string(src), "\n")
		if strings.HasSuffix(first, "sh") {
			return shellComments
		}
	}
	return nil
}

// webAddress is a URL, whose path may end in another site's .md file.
var webAddress = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://\S+`)

// CheckComments checks the comments of every tracked source file (Go,
// Python, TypeScript and JavaScript, shell scripts): a comment that names
// a .md file must name one the repository has, beside the file or from the
// root, as a page must. Strings and code are not read: a test may name a
// missing page on purpose.
func (t *Tree) CheckComments() ([]Problem, error) {
	files := make([]string, 0, len(t.files))
	for f := range t.files {
		files = append(files, f)
	}
	sort.Strings(files)
	var probs []Problem
	for _, f := range files {
		if commentsOf[path.Ext(f)] == nil && path.Ext(f) != "" {
			continue
		}
		src, err := os.ReadFile(path.Join(t.Root, f))
		if os.IsNotExist(err) {
			continue // tracked, deleted in the work tree
		}
		if err != nil {
			return nil, err
		}
		read := sourceKind(f, src)
		if read == nil {
			continue
		}
		for _, c := range read(src) {
			text := webAddress.ReplaceAllString(c.text, "")
			for i, l := range strings.Split(text, "\n") {
				t.checkNames(f, []byte(l), func(format string, args ...any) {
					probs = append(probs, Problem{File: f, Line: c.line + i, Msg: "a comment " + fmt.Sprintf(format, args...)})
				})
			}
		}
	}
	return probs, nil
}

// goComments are the comments of Go source src, as go/scanner reads them
// (a file that does not scan cleanly still gives those before the error).
func goComments(src []byte) []comment {
	fset := token.NewFileSet()
	file := fset.AddFile("", fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, scanner.ScanComments)
	var out []comment
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok == token.COMMENT {
			out = append(out, comment{line: file.Line(pos), text: lit})
		}
	}
}

// pythonComments are the # comments of Python source src and its
// triple-quoted strings (docstrings); other strings are skipped.
func pythonComments(src []byte) []comment {
	var out []comment
	line := 1
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '\n':
			line++
		case c == '#':
			end := indexFrom(src, i, "\n")
			out = append(out, comment{line: line, text: string(src[i:end])})
			i = end - 1
		case c == '"' || c == '\'':
			quote := string(src[i : i+1])
			if bytes.HasPrefix(src[i:], []byte(strings.Repeat(quote, 3))) {
				quote = strings.Repeat(quote, 3)
			}
			end := closing(src, i+len(quote), quote)
			if len(quote) == 3 {
				out = append(out, comment{line: line, text: string(src[i:end])})
			}
			line += bytes.Count(src[i:end], []byte("\n"))
			i = end - 1
		}
	}
	return out
}

// cComments are the // and /* */ comments of TypeScript or JavaScript
// source src; strings and template literals are skipped.
func cComments(src []byte) []comment {
	var out []comment
	line := 1
	for i := 0; i < len(src); i++ {
		rest := src[i:]
		switch c := src[i]; {
		case c == '\n':
			line++
		case bytes.HasPrefix(rest, []byte("//")):
			end := indexFrom(src, i, "\n")
			out = append(out, comment{line: line, text: string(src[i:end])})
			i = end - 1
		case bytes.HasPrefix(rest, []byte("/*")):
			end := indexFrom(src, i+2, "*/")
			if end < len(src) {
				end += 2
			}
			out = append(out, comment{line: line, text: string(src[i:end])})
			line += bytes.Count(src[i:end], []byte("\n"))
			i = end - 1
		case c == '"' || c == '\'' || c == '`':
			end := closing(src, i+1, string(c))
			line += bytes.Count(src[i:end], []byte("\n"))
			i = end - 1
		}
	}
	return out
}

// shellComments are the # comments of shell script src: a # that starts
// a word, outside quotes.
func shellComments(src []byte) []comment {
	var out []comment
	for n, l := range strings.Split(string(src), "\n") {
		var quote byte
		for i := 0; i < len(l); i++ {
			c := l[i]
			switch {
			case quote != 0:
				if c == quote {
					quote = 0
				} else if c == '\\' && quote == '"' {
					i++
				}
			case c == '\\':
				i++
			case c == '\'' || c == '"':
				quote = c
			case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
				out = append(out, comment{line: n + 1, text: l[i:]})
				i = len(l)
			}
		}
	}
	return out
}

// indexFrom is the offset of the first sep in src at or after from, or
// len(src).
func indexFrom(src []byte, from int, sep string) int {
	if from > len(src) {
		return len(src)
	}
	if j := bytes.Index(src[from:], []byte(sep)); j >= 0 {
		return from + j
	}
	return len(src)
}

// closing is the offset just past the quote that ends a string opened
// before from, a backslash escaping the character after it; len(src) if
// none does.
func closing(src []byte, from int, quote string) int {
	for i := from; i < len(src); i++ {
		if src[i] == '\\' {
			i++
			continue
		}
		if bytes.HasPrefix(src[i:], []byte(quote)) {
			return i + len(quote)
		}
		if len(quote) == 1 && quote != "`" && src[i] == '\n' {
			return i // an unterminated one-line string ends with its line
		}
	}
	return len(src)
}
