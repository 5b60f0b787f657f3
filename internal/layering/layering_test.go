// Package layering checks that imports run one way: the codec, the clock,
// the lock table and the token store use only the standard library; the
// client uses only the codec and the clock, and all three are the client's
// own module, which the server's packages import and never the reverse;
// the server never reaches up to ops, the CLI or the client; test helpers
// stay out of production code.
package layering

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const (
	module       = "github.com/batonlock/baton"
	clientModule = module + "/clients/go"
)

// allowed lists, for each package of ours, the packages of ours it may
// depend on, directly or not. Third-party modules are checked separately.
var allowed = map[string][]string{
	"clients/go/wire":         {},
	"clients/go/clock":        {},                                      // the clock of every lease deadline, the server's too
	"clients/go":              {"clients/go/wire", "clients/go/clock"}, // the client, package baton: a module of its own
	"clients/go/fence":        {},                                      // the fencing kits' client halves: the user's drivers, not ours
	"locktable":               {},
	"internal/tokenstore":     {},
	"internal/faultproxy":     {},
	"internal/testcerts":      {},
	"internal/hidden":         {}, // the one rule of hidden characters, for the CLI and the dashboard
	"server":                  {"clients/go/wire", "clients/go/clock", "locktable", "internal/tokenstore", serverIdlepoll, serverRawsock},
	"ops":                     {"server", serverIdlepoll, serverRawsock, "clients/go/wire", "clients/go/clock", "locktable", "internal/tokenstore", "internal/hidden"},
	"cluster":                 {"server", serverIdlepoll, serverRawsock, "clients/go/wire", "clients/go/clock", "locktable", "internal/tokenstore"}, // never the reverse: server does not know Raft
	"internal/netaddr":        {},                                                                                                                   // the one rule of "this machine's address"
	"internal/tokenfile":      {},                                                                                                                   // the admin token's file, for the server and the operator commands
	"internal/human":          {"internal/hidden"},                                                                                                  // the command line's text for people
	"internal/sniff":          {"clients/go/wire"},                                                                                                  // a lock client on the ops port, told where to go
	"internal/opsclient":      {"clients/go/wire"},                                                                                                  // the ops API's client: never the server's packages
	"internal/supervise":      {},                                                                                                                   // baton run's command and its watchdog: the standard library and x/sys
	"internal/opsview":        {"internal/opsclient", "clients/go/wire", "internal/human", "internal/hidden"},                                       // the ops API's answers written for people
	"internal/watch":          {"internal/opsclient", "internal/opsview", "clients/go/wire", "internal/human", "internal/hidden"},                   // baton watch's follower of the event stream
	"internal/servesec":       {"server", serverIdlepoll, serverRawsock, "clients/go/wire", "clients/go/clock", "locktable", "internal/tokenstore"}, // baton serve's listener security: TLS, access rules, their reload
	"internal/cli":            {"*"},
	"internal/runner":         {"clients/go", "clients/go/wire", "clients/go/clock", "internal/human", "internal/hidden", "internal/opsclient", "internal/supervise"}, // the lock side of baton run, lock and elect
	"cmd/baton":               {"*"},
	"internal/batontest":      {"*"},
	"internal/reliability":    {}, // its tests use every package; the package itself none
	"internal/clusterharness": {}, // the same: only tests
	"internal/clienttest":     {}, // the same: the client against the server
	"internal/proctest":       {}, // child processes for tests: the standard library and goleak
	"internal/layering":       {},
	"internal/doccheck":       {}, // the docs' checks: Markdown only
	"internal/licensing":      {}, // only tests: the licence in every package file
	"internal/resourcetest":   {}, // PostgreSQL and Redis for the fencing kits' tests
	// An HTTP service behind the fencing middleware, for the other-language clients' suites.
	"internal/resourcetest/cmd/fencedcounter": {"clients/go/fence"},
	"fence": {}, // the kits' resource-side files; only tests, with real drivers
	// Only tests: they run the other-language clients' suites.
	"clients": {},
	// The fault proxy as a process, for those suites.
	"internal/faultproxy/cmd/faultproxy": {"internal/faultproxy"},

	// The server's own rooms, which only it imports (Go's internal/ rule):
	// what knows nothing of sessions.
	serverIdlepoll: {}, // the idle poller: epoll shards that serve parked connections
	serverRawsock:  {}, // accept4, and a net.Conn over the descriptor it gives
}

const (
	serverIdlepoll = "server/internal/idlepoll"
	serverRawsock  = "server/internal/rawsock"
)

// stdOnly lists the packages that may not depend on any other module;
// those in stdOrSys may also use golang.org/x/sys, as the client may.
var (
	stdOnly  = map[string]bool{"clients/go/wire": true, "clients/go/clock": true, "clients/go/fence": true, "locktable": true, "internal/tokenstore": true, "internal/faultproxy": true, "internal/testcerts": true, "internal/resourcetest": true, "internal/hidden": true, "internal/human": true, "internal/netaddr": true, "internal/sniff": true, "internal/opsclient": true, "internal/opsview": true, "internal/watch": true, "internal/tokenfile": true}
	stdOrSys = map[string]bool{"clients/go": true, "internal/supervise": true, serverIdlepoll: true, serverRawsock: true}
)

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
	seen, clientPkgs := 0, 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		seen++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if p.ImportPath == clientModule || strings.HasPrefix(p.ImportPath, clientModule+"/") {
			clientPkgs++
			if p.Module == nil || p.Module.Path != clientModule {
				t.Errorf("%q is not in the client's module %s: the client's users would get the server's requirements", rel, clientModule)
			}
		}
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
				if stdOrSys[rel] && !isStd(d) && !isSys(d) {
					t.Errorf("%q depends on %q: it may use only the standard library, golang.org/x/sys and its allowed packages", rel, d)
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
	if clientPkgs < 2 {
		t.Fatalf("go list found %d packages of the client's module, want clients/go and clients/go/wire", clientPkgs)
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

// isSys reports whether an import path is in golang.org/x/sys.
func isSys(path string) bool {
	return path == "golang.org/x/sys" || strings.HasPrefix(path, "golang.org/x/sys/")
}

// isStd reports whether an import path is in the standard library: its
// first element has no dot (vendored golang.org/x copies live under vendor/).
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") || strings.HasPrefix(path, "vendor/")
}
