// Package layering checks that imports run one way (STYLE.md): the codec,
// the lock table and the token store use only the standard library; the
// client uses only the codec; the server never reaches up to ops, the CLI or
// the client; test helpers stay out of production code.
package layering

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/batonlock/baton"

// allowed lists, for each package of ours, the packages of ours it may
// depend on, directly or not. Third-party modules are checked separately.
var allowed = map[string][]string{
	"wire":                    {},
	"locktable":               {},
	"internal/tokenstore":     {},
	"internal/faultproxy":     {},
	"internal/testcerts":      {},
	"server":                  {"wire", "locktable", "internal/tokenstore"},
	"ops":                     {"server", "wire", "locktable", "internal/tokenstore"},
	"cluster":                 {"server", "wire", "locktable", "internal/tokenstore"}, // never the reverse: server does not know Raft
	"":                        {"wire"},                                               // the client, package baton
	"internal/cli":            {"*"},
	"cmd/baton":               {"*"},
	"internal/batontest":      {"*"},
	"internal/reliability":    {}, // its tests use every package; the package itself none
	"internal/clusterharness": {}, // the same: only tests
	"internal/proctest":       {}, // child processes for tests: the standard library and goleak
	"internal/layering":       {},
	"internal/doccheck":       {}, // the docs' checks: Markdown only
	// Only tests: they run the other-language clients' suites.
	"clients": {},
	// The fault proxy as a process, for those suites.
	"internal/faultproxy/cmd/faultproxy": {"internal/faultproxy"},
}

// stdOnly lists the packages that may not depend on any other module.
var stdOnly = map[string]bool{"wire": true, "locktable": true, "internal/tokenstore": true, "": true, "internal/faultproxy": true, "internal/testcerts": true}

type pkg struct {
	ImportPath string
	Deps       []string
	Module     *struct{ Path string }
	Standard   bool
}

func TestImportsRunOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		seen++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		rules, known := allowed[rel]
		if !known {
			t.Errorf("package %q has no layering rule: add it to allowed", rel)
			continue
		}
		for _, d := range p.Deps {
			if d == module+"/internal/batontest" || d == module+"/internal/testcerts" {
				t.Errorf("%q imports %s, which is for tests only", rel, strings.TrimPrefix(d, module+"/"))
			}
			if !strings.HasPrefix(d, module) {
				if stdOnly[rel] && !isStd(d) {
					t.Errorf("%q depends on %q: it may use only the standard library and its allowed packages", rel, d)
				}
				continue
			}
			drel := strings.TrimPrefix(strings.TrimPrefix(d, module), "/")
			if !permits(rules, drel) {
				t.Errorf("%q depends on %q, which it may not (allowed: %q)", rel, drel, rules)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("go list found %d packages; the check is not looking at the module", seen)
	}
}

func permits(rules []string, dep string) bool {
	for _, r := range rules {
		if r == "*" || r == dep {
			return true
		}
	}
	return false
}

// isStd reports whether an import path is in the standard library: its
// first element has no dot (vendored golang.org/x copies live under vendor/).
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") || strings.HasPrefix(path, "vendor/")
}
