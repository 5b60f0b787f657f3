package doccheck

import (
	"os"
	"testing"
)

// stillToClean are the pages that still tell some of their own history;
// remove a page from here once History finds nothing in it.
var stillToClean = map[string]bool{}

// repository is this repository's tracked tree. Outside a git work tree
// (an unpacked source archive) there is nothing to check, except in CI,
// which always runs in a clone.
func repository(t *testing.T) *Tree {
	t.Helper()
	tr, err := Tracked(".")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI runs in a git clone, but: %v", err)
		}
		t.Skipf("not in a git work tree: %v", err)
	}
	return tr
}

func TestRepositoryLinks(t *testing.T) {
	tr := repository(t)
	probs, err := tr.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
	if len(tr.Pages()) < 5 {
		t.Errorf("only %d tracked .md pages found in %s: is this the repository?", len(tr.Pages()), tr.Root)
	}
}

func TestRepositoryPagesTellNoHistory(t *testing.T) {
	tr := repository(t)
	for _, f := range tr.Pages() {
		probs, err := tr.History(f)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case stillToClean[f] && len(probs) == 0:
			t.Errorf("%s tells no history any more: remove it from stillToClean", f)
		case !stillToClean[f]:
			for _, p := range probs {
				t.Error(p)
			}
		}
	}
}

func TestRepositoryFolderTable(t *testing.T) {
	tr := repository(t)
	probs, err := tr.Folders("README.md", "Where things are")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}

func TestRepositoryComments(t *testing.T) {
	tr := repository(t)
	probs, err := tr.CheckComments()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}
