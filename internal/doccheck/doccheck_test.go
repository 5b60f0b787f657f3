package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path → content) under a temporary root and returns
// the Tree that tracks them all.
func tree(t *testing.T, files map[string]string) *Tree {
	t.Helper()
	root := t.TempDir()
	var names []string
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return NewTree(root, names)
}

// messages renders problems one a line, for failure output and matching.
func messages(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

func TestSlugFollowsGitHub(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"1. The model in brief", "1-the-model-in-brief"},
		{"12. Replicated mode: clusters and NOT_LEADER", "12-replicated-mode-clusters-and-not_leader"},
		{"Pauses: what they can and cannot break", "pauses-what-they-can-and-cannot-break"},
		{"ACQUIRE (0x01), client -> server", "acquire-0x01-client---server"},
		{"Fencing with $BATON_TOKEN", "fencing-with-baton_token"},
		{"Handover p50 ≤ 1.5× RTT, µs", "handover-p50--15-rtt-µs"},
		{"8. A cluster node: certificates, the Raft port, and forwarding", "8-a-cluster-node-certificates-the-raft-port-and-forwarding"},
	} {
		if got := Slug(c.heading); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestAnchors(t *testing.T) {
	tr := tree(t, map[string]string{"a.md": "# Top\n\n## Using `baton run` [here](x.md)\n\n## Notes\n\n## Notes\n\n```sh\n# not a heading\n```\n\n<a id=\"custom\"></a>\n\n## **Bold** _and_ emphasis\n"})
	p, err := tr.page("a.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"top", "using-baton-run-here", "notes", "notes-1", "custom", "bold-and-emphasis"} {
		if !p.anchors[want] {
			t.Errorf("anchor %q missing; have %v", want, p.anchors)
		}
	}
	if p.anchors["not-a-heading"] {
		t.Errorf("a heading inside a code block got an anchor")
	}
}

func TestCheckFindsEachKindOfBrokenLink(t *testing.T) {
	tr := tree(t, map[string]string{
		"README.md": "# Readme\n\n" +
			"[ok](docs/guide.md), [ok anchor](docs/guide.md#the-part), [folder](docs/), [image](docs/pic.png)\n\n" +
			"[missing file](docs/gone.md)\n\n" +
			"[missing anchor](docs/guide.md#no-such-part)\n\n" +
			"[own anchor](#readme) and [bad own anchor](#nowhere)\n\n" +
			"[outside](../elsewhere.md)\n\n" +
			"[web](https://example.com/x.md#y) <https://example.com>\n\n" +
			"`[in code](nowhere.txt)` and\n\n```\n[in a block](nowhere.md)\n```\n\n" +
			"[ref][r]\n\n[r]: docs/absent.md\n\n" +
			"<img src=\"docs/absent.png\">\n",
		"docs/guide.md": "# Guide\n\n## The part\n\n[back](../README.md#readme) [line](../main.go#L3)\n",
		"docs/pic.png":  "png",
		"main.go":       "package main\n",
	})
	probs, err := tr.Check()
	if err != nil {
		t.Fatal(err)
	}
	got := messages(probs)
	for _, want := range []string{
		`README.md:5: link "docs/gone.md": no file docs/gone.md`,
		`README.md:7: link "docs/guide.md#no-such-part": docs/guide.md has no heading with the anchor #no-such-part`,
		`README.md:9: link "#nowhere": README.md has no heading with the anchor #nowhere`,
		`README.md:11: link "../elsewhere.md": points outside the repository`,
		`link "docs/absent.md": no file docs/absent.md`,
		`link "docs/absent.png": no file docs/absent.png`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing problem %q in:\n%s", want, got)
		}
	}
	if n := len(probs); n != 6 {
		t.Errorf("got %d problems, want 6 (links in code, to other sites, and the good ones pass):\n%s", n, got)
	}
}

func TestCheckUntrackedTarget(t *testing.T) {
	tr := tree(t, map[string]string{"a.md": "[b](b.md)\n"})
	if err := os.WriteFile(filepath.Join(tr.Root, "b.md"), []byte("# B\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	probs, err := tr.Check()
	if err != nil {
		t.Fatal(err)
	}
	if got := messages(probs); !strings.Contains(got, "b.md is not tracked by git") {
		t.Errorf("a link to an untracked file: got %q, want it refused as not on GitHub", got)
	}
}

func TestCheckNamesOfMissingPages(t *testing.T) {
	tr := tree(t, map[string]string{
		"README.md":        "# R\n\nSee docs/ops.md and `PROTOCOL.md`; README.md is here.\n\n```\nSPEC.md in a block is code\n```\n",
		"docs/ops.md":      "# Ops\n\nBeside it: guide.md; from the root: docs/guide.md. Not here: OPS.md.\n",
		"docs/guide.md":    "# G\n",
		"docs/extra/x.txt": "",
	})
	probs, err := tr.Check()
	if err != nil {
		t.Fatal(err)
	}
	got := messages(probs)
	want := "README.md:3: names PROTOCOL.md, which is not a file of the repository\n" +
		"docs/ops.md:3: names OPS.md, which is not a file of the repository\n"
	if got != want {
		t.Errorf("got:\n%swant:\n%s", got, want)
	}
}

func TestCheckHeadingRightAfterParagraph(t *testing.T) {
	tr := tree(t, map[string]string{"cli.md": "# Title\n## Right under a heading: fine\n\nA paragraph.\n### baton watch\n\nText.\n\n    # indented code, not a heading\n"})
	probs, err := tr.Check()
	if err != nil {
		t.Fatal(err)
	}
	want := "cli.md:5: heading \"baton watch\" right after a paragraph: put a blank line before it, or it may render as text\n"
	if got := messages(probs); got != want {
		t.Errorf("got:\n%swant:\n%s", got, want)
	}
}

func TestHistory(t *testing.T) {
	tr := tree(t, map[string]string{"b.md": strings.Join([]string{
		"# Benchmarks",
		"Issue 16 asks for a floor.",
		"The sixth pass moved the push.",
		"Measured on `a9c7dba` at 15:57 UTC, load average 1.2.",
		"Results, started 2026-12-03T09:19:58Z.",
		"(commit 9432be2)",
		"Before this change the heartbeat cost more.",
		"Clean: 0x0100000000000002, `deadbeef`, `1234567`, a pass-through proxy, 2026-12-04 04:30:00.123 in a log.",
	}, "\n")})
	probs, err := tr.History("b.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[int]bool{}
	for _, p := range probs {
		lines[p.Line] = true
	}
	for l := 2; l <= 7; l++ {
		if !lines[l] {
			t.Errorf("line %d not reported; got:\n%s", l, messages(probs))
		}
	}
	if lines[1] || lines[8] {
		t.Errorf("a clean line reported:\n%s", messages(probs))
	}
}

func TestFolders(t *testing.T) {
	files := map[string]string{
		"go.mod": "", "wire/frame.go": "", "wire/testdata/x": "", "ops/ops.go": "", "ops/ui/index.html": "",
		"internal/cli/cli.go": "", "internal/tokenstore/t.go": "", "clients/clients_test.go": "", "clients/python/p.py": "",
	}
	good := "# Baton\n\n## Where things are\n\n| path | what |\n|---|---|\n" +
		"| `wire/` | bytes; `wire/testdata/` its corpus |\n" +
		"| `ops/` | the ops API; `ops/ui/` the dashboard |\n" +
		"| `internal/cli/` | the CLI |\n| `internal/tokenstore/` | tokens |\n" +
		"| `clients/` | `clients/python/` and a test |\n| root | `go.mod`, the client |\n"
	files["README.md"] = good
	probs, err := tree(t, files).Folders("README.md", "Where things are")
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 0 {
		t.Errorf("a table that matches the tree: got\n%s", messages(probs))
	}

	files["README.md"] = "# Baton\n\n## Where things are\n\n| path | what |\n|---|---|\n" +
		"| `wire/` | bytes |\n| `ops/` | the ops API |\n| `ops/` | again, with `ops/ui/` |\n" +
		"| `internal/cli/` | the CLI |\n| `gone/` | a folder no more |\n| `clients/python/` | Python |\n"
	probs, err = tree(t, files).Folders("README.md", "Where things are")
	if err != nil {
		t.Fatal(err)
	}
	got := messages(probs)
	for _, want := range []string{
		`names ops/ twice`,
		`names gone/, which is not a folder`,
		`does not name wire/testdata/`,
		`does not name internal/tokenstore/`,
		`does not name clients/,`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "does not name internal/,") {
		t.Errorf("internal/ has no files of its own: its folders name it; got\n%s", got)
	}
}

func TestCheckCommentsNamesOfMissingPages(t *testing.T) {
	tr := tree(t, map[string]string{
		"docs/protocol.md": "# P\n",
		"README.md":        "# R\n",
		"server/a.go": "// Package a speaks docs/protocol.md, not PROTOCOL.md.\npackage a\n\n" +
			"var s = \"a string may name GONE.md\"\n\n/* see\n   OPS.md */\nvar r = `raw NOPE.md`\n",
		"clients/c.py": "\"\"\"The bytes of docs/protocol.md and\nSPEC.md.\"\"\"\n\nx = 'STRING.md'  # but this names HASH.md\n" +
			"y = \"#NOT.md\"\n# README.md is at the root; https://example.com/x/OTHER.md is another site's\n",
		"clients/s.ts": "/** The bytes of WIRE.md. */\nconst a = \"//NOT.md\", b = `/* NOR.md */`;\n// LINE.md\n",
		"scripts/x.sh": "#!/bin/sh\necho \"# NOT.md\" '#NEITHER.md' # TAIL.md\n",
		".ci/run":      "#!/usr/bin/env bash\n# RUN.md\n",
		"notes.txt":    "# TEXT.md: not source\n",
	})
	probs, err := tr.CheckComments()
	if err != nil {
		t.Fatal(err)
	}
	got := messages(probs)
	want := ".ci/run:2: a comment names RUN.md, which is not a file of the repository\n" +
		"clients/c.py:2: a comment names SPEC.md, which is not a file of the repository\n" +
		"clients/c.py:4: a comment names HASH.md, which is not a file of the repository\n" +
		"clients/s.ts:1: a comment names WIRE.md, which is not a file of the repository\n" +
		"clients/s.ts:3: a comment names LINE.md, which is not a file of the repository\n" +
		"scripts/x.sh:2: a comment names TAIL.md, which is not a file of the repository\n" +
		"server/a.go:1: a comment names PROTOCOL.md, which is not a file of the repository\n" +
		"server/a.go:7: a comment names OPS.md, which is not a file of the repository\n"
	if got != want {
		t.Errorf("got:\n%swant:\n%s", got, want)
	}
}
