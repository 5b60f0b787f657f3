package report

import (
	"bytes"
	"fmt"
	"os"
)

// Markers around the generated part of docs/benchmarks.md.
const (
	BeginMarker = "<!-- bench results: begin (written by `go run .` in bench/) -->"
	EndMarker   = "<!-- bench results: end -->"
)

// UpdateDoc replaces what lies between the markers in the file at path
// with md, leaving the hand-written text around them as it is.
func UpdateDoc(path, md string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := bytes.Index(doc, []byte(BeginMarker))
	j := bytes.Index(doc, []byte(EndMarker))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q section to replace", path, BeginMarker, EndMarker)
	}
	var b bytes.Buffer
	b.Write(doc[:i+len(BeginMarker)])
	b.WriteString("\n\n")
	b.WriteString(md)
	b.WriteString("\n")
	b.Write(doc[j:])
	return os.WriteFile(path, b.Bytes(), 0o644)
}
