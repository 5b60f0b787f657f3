package licensing

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// spdx is the licence of the repository and of every package made from it.
const spdx = "Apache-2.0"

// root is the repository's top folder (this package is internal/licensing).
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func read(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLicenseIsApache: LICENSE is the Apache License 2.0, and each folder
// that is published on its own (a Go module, a Python or npm package)
// carries the same bytes, since its archive holds nothing of the
// repository's root.
func TestLicenseIsApache(t *testing.T) {
	lic := read(t, "LICENSE")
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS"} {
		if !bytes.Contains(lic, []byte(want)) {
			t.Errorf("LICENSE does not contain %q: it is not the Apache License 2.0", want)
		}
	}
	for _, dir := range []string{"clients/go", "clients/python", "clients/typescript"} {
		copy, err := os.ReadFile(filepath.Join(root(t), dir, "LICENSE"))
		switch {
		case err != nil:
			t.Errorf("%s is published on its own but has no LICENSE: %v", dir, err)
		case !bytes.Equal(copy, lic):
			t.Errorf("%s/LICENSE differs from the repository's LICENSE", dir)
		}
	}
}

// TestPackageFilesNameOneLicense: every file that describes a package
// names Apache-2.0: the Python project, the npm package, the Helm chart
// and the container image's label.
func TestPackageFilesNameOneLicense(t *testing.T) {
	for _, c := range []struct {
		file string
		re   string // its first group is the licence named
	}{
		{"clients/python/pyproject.toml", `(?m)^license\s*=\s*\{\s*text\s*=\s*"([^"]*)"`},
		{"clients/typescript/package.json", `(?m)^\s*"license":\s*"([^"]*)"`},
		{"deploy/helm/baton/Chart.yaml", `(?m)^\s*artifacthub\.io/license:\s*"?([^"\s]*)`},
		{"deploy/image/main.go", `"org\.opencontainers\.image\.licenses":\s*"([^"]*)"`},
	} {
		m := regexp.MustCompile(c.re).FindAllSubmatch(read(t, c.file), -1)
		if len(m) != 1 {
			t.Errorf("%s: %d licence fields (%s), want 1", c.file, len(m), c.re)
			continue
		}
		if got := string(m[0][1]); got != spdx {
			t.Errorf("%s names licence %q, want %q (LICENSE)", c.file, got, spdx)
		}
	}
	// The Python package's classifier says the same.
	if py := read(t, "clients/python/pyproject.toml"); !bytes.Contains(py, []byte(`"License :: OSI Approved :: Apache Software License"`)) {
		t.Errorf("clients/python/pyproject.toml: no Apache classifier")
	}
}

// TestNoticeNamesWhatLicensesAsk: NOTICE names every module linked into
// the baton binary whose licence asks for it: each Apache-2.0 module with
// a NOTICE file of its own (section 4(d): its notices go with the
// binary, and NOTICE quotes them) and each MPL-2.0 module (section 3.2:
// the recipient is told where its source is). A dependency added or
// changed fails here until NOTICE says what it must.
func TestNoticeNamesWhatLicensesAsk(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("SKIPPED: no go command to list the binary's modules: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", "-json=Module", "./cmd/baton")
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/baton: %v", err)
	}
	notice := string(read(t, "NOTICE"))
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	mpl, withNotice := 0, 0
	for dec.More() {
		var p struct {
			Module *struct {
				Path, Dir string
				Main      bool
			}
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		m := p.Module
		if m == nil || m.Main || seen[m.Path] || strings.HasPrefix(m.Path, "github.com/batonlock/baton") {
			continue
		}
		seen[m.Path] = true
		entries, err := os.ReadDir(m.Dir)
		if err != nil {
			t.Fatalf("module %s: %v", m.Path, err)
		}
		for _, e := range entries {
			name := strings.ToUpper(e.Name())
			switch {
			case strings.HasPrefix(name, "NOTICE"):
				withNotice++
				text, err := os.ReadFile(filepath.Join(m.Dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(notice, "-- "+m.Path+" --\n"+strings.TrimSpace(string(text))) {
					t.Errorf("module %s has a NOTICE file, which NOTICE does not quote under \"-- %s --\"", m.Path, m.Path)
				}
			case strings.HasPrefix(name, "LICENSE"):
				text, err := os.ReadFile(filepath.Join(m.Dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(text, []byte("Mozilla Public License")) {
					mpl++
					if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(m.Path) + `\s+https://`).MatchString(notice) {
						t.Errorf("module %s is under the Mozilla Public License, and NOTICE does not say where its source is", m.Path)
					}
				}
			}
		}
	}
	if len(seen) == 0 || mpl == 0 || withNotice == 0 {
		t.Fatalf("go list found %d modules, %d under the MPL and %d with a NOTICE: the listing is not the binary's", len(seen), mpl, withNotice)
	}
	t.Logf("%d modules linked into baton: %d under the MPL, %d with a NOTICE, each checked against NOTICE", len(seen), mpl, withNotice)
}
