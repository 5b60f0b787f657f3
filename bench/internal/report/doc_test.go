package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUpdateDoc(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	before := "# Title\n\nhand-written\n\n" + BeginMarker + "\nold tables\n" + EndMarker + "\n\nafter\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateDoc(path, "new tables\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	if strings.Contains(got, "old tables") || !strings.Contains(got, "new tables") {
		t.Errorf("section not replaced:\n%s", got)
	}
	if !strings.HasPrefix(got, "# Title\n\nhand-written\n\n"+BeginMarker) || !strings.HasSuffix(got, EndMarker+"\n\nafter\n") {
		t.Errorf("hand-written text changed:\n%s", got)
	}

	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateDoc(path, "x"); err == nil || !strings.Contains(err.Error(), "no ") {
		t.Errorf("UpdateDoc without markers: err %v, want one naming the missing section", err)
	}
}
