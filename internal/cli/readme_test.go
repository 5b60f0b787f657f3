//go:build unix

package cli

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
)

// The README's first steps, run as a new user runs them: the built binary
// as ./baton in a directory of its own.

// readmeSection returns the text of the README section headed title, up to
// the next section of the same level.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", title)
	}
	text = text[i+1:]
	if j := strings.Index(text[1:], "\n## "); j >= 0 {
		text = text[:j+1]
	}
	return text
}

// shellLine is one command of a README block and its trailing comment.
type shellLine struct{ cmd, comment string }

// trailingComment is a comment after a command: two spaces or more, then #.
var trailingComment = regexp.MustCompile(`\s{2,}#\s*(.*)$`)

// shellBlocks returns the commands of the ```sh blocks of text, in order.
func shellBlocks(text string) [][]shellLine {
	var blocks [][]shellLine
	for _, part := range strings.Split(text, "```sh\n")[1:] {
		body, _, _ := strings.Cut(part, "```")
		var block []shellLine
		for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
			var sl shellLine
			if m := trailingComment.FindStringSubmatchIndex(l); m != nil {
				sl.comment = l[m[2]:m[3]]
				l = l[:m[0]]
			}
			sl.cmd = strings.TrimSpace(l)
			block = append(block, sl)
		}
		blocks = append(blocks, block)
	}
	return blocks
}

// tourDir is a directory with the built binary as ./baton, and an
// environment without BATON_ variables plus env.
func tourDir(t *testing.T, env ...string) (dir string, environ []string) {
	t.Helper()
	bin := buildBaton(t)
	dir = t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "baton")); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			environ = append(environ, kv)
		}
	}
	return dir, append(environ, env...)
}

// shellCmd is line run by sh in dir; a background one is exec'ed, so that
// its process is the command's.
func shellCmd(t *testing.T, dir string, env []string, line string) (*exec.Cmd, *batontest.SyncBuffer, *batontest.SyncBuffer) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	stdout, stderr := new(batontest.SyncBuffer), new(batontest.SyncBuffer)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	return cmd, stdout, stderr
}

// assignThen is a shell line that sets a variable, then runs a command.
var assignThen = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*=\S*; )(.*)$`)

// startShell starts line in the background; the test's end kills it. The
// last command of line is exec'ed, so that the process is the command's.
func startShell(t *testing.T, dir string, env []string, line string) (*exec.Cmd, *batontest.SyncBuffer, <-chan int) {
	t.Helper()
	if m := assignThen.FindStringSubmatch(line); m != nil {
		line = m[1] + "exec " + m[2]
	} else {
		line = "exec " + line
	}
	cmd, stdout, _ := shellCmd(t, dir, env, line)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		cmd.Wait()
		done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case code := <-done:
			done <- code
		case <-time.After(10 * time.Second):
		}
	})
	return cmd, stdout, done
}

// TestReadmeTour runs the one-minute tour line by line against the built
// binary: the ports move to free ones (BATON_ADDR and BATON_OPS_ADDR, which
// every command reads, and the curl lines' URLs), nothing else changes.
// Each line's comment is its expected outcome: "exits N" is the exit
// status, other text the start of what it prints.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	blocks := shellBlocks(readmeSection(t, "A one-minute tour"))
	if len(blocks) == 0 || blocks[0][0].cmd != "go build ./cmd/baton" {
		t.Fatalf("the tour does not start with go build ./cmd/baton: %q", blocks)
	}
	addr, opsAddr := closedAddr(t), closedAddr(t)
	dir, env := tourDir(t, "BATON_ADDR="+addr, "BATON_OPS_ADDR="+opsAddr)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var server *exec.Cmd
	var serverDone <-chan int
	for _, block := range blocks {
		for _, l := range block {
			if strings.Contains(l.cmd, "go run") {
				t.Errorf("the tour uses go run: %q", l.cmd)
			}
			line := strings.ReplaceAll(l.cmd, "localhost:7071", opsAddr)
			switch {
			case line == "go build ./cmd/baton":
				continue // built once for the tests: ./baton is it
			case !strings.HasPrefix(line, "./baton ") && !strings.HasPrefix(line, "curl "):
				t.Errorf("tour line %q runs neither ./baton nor curl", l.cmd)
				continue
			case line == "./baton serve":
				server, _, serverDone = startShell(t, dir, env, line)
				batontest.Eventually(t, 15*time.Second, func() bool {
					return httpGet(t, hc, "http://"+opsAddr+"/readyz") == http.StatusOK
				}, "./baton serve is not ready on %s", opsAddr)
				continue
			case strings.Contains(line, "sleep 30"):
				// The holder, in a shell of its own.
				_, out, _ := startShell(t, dir, env, line)
				batontest.Eventually(t, 15*time.Second, func() bool {
					return strings.HasPrefix(out.String(), "holding jobs, token ")
				}, "%q printed %q, not the holding line", line, out)
				continue
			}
			cmd, stdout, stderr := shellCmd(t, dir, env, line)
			cmd.Run()
			code := cmd.ProcessState.ExitCode()
			wantCode := 0
			if n, err := fmt.Sscanf(l.comment, "exits %d", &wantCode); n != 1 || err != nil {
				wantCode = 0
				if want := strings.Join(strings.Fields(l.comment), " "); want != "" {
					if got := strings.Join(strings.Fields(stdout.String()), " "); !strings.HasPrefix(got, want) {
						t.Errorf("%q printed %q, want it to start with %q (the README's comment)", line, stdout, want)
					}
				} else if stdout.String() == "" {
					t.Errorf("%q printed nothing", line)
				}
			}
			if code != wantCode {
				t.Errorf("%q: exit status %d, want %d; stderr %q", line, code, wantCode, stderr)
			}
		}
	}
	if server == nil {
		t.Fatal("the tour starts no ./baton serve")
	}
	// "Stop the server with Ctrl-C or SIGTERM: ... it exits 0."
	server.Process.Signal(syscall.SIGTERM)
	select {
	case code := <-serverDone:
		if code != 0 {
			t.Errorf("./baton serve after SIGTERM: exit status %d, want 0", code)
		}
	case <-time.After(20 * time.Second):
		t.Error("./baton serve still runs 20s after SIGTERM")
	}
}

// TestReadmeCluster runs the README's 3-node cluster on free ports: the
// nodes elect a leader, and everything they write is under the one folder
// that the repository's .gitignore ignores.
func TestReadmeCluster(t *testing.T) {
	t.Parallel()
	blocks := shellBlocks(readmeSection(t, "A 3-node cluster on one machine"))
	if len(blocks) < 2 || len(blocks[0]) != 4 || !strings.HasPrefix(blocks[0][0].cmd, "P=") {
		t.Fatalf("the cluster section's first block is not P=... and three nodes: %q", blocks)
	}
	// Every address moves to a free port, the same one wherever it recurs.
	ports := map[string]string{}
	hostPort := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	remap := func(s string) string {
		return hostPort.ReplaceAllStringFunc(s, func(a string) string {
			if ports[a] == "" {
				ports[a] = closedAddr(t)
			}
			return ports[a]
		})
	}
	setP := remap(blocks[0][0].cmd)
	dataDir := regexp.MustCompile(`-data-dir (\S+)`)
	var roots []string
	dir, env := tourDir(t)
	for _, l := range blocks[0][1:] {
		m := dataDir.FindStringSubmatch(l.cmd)
		if !strings.HasPrefix(l.cmd, "./baton serve ") || m == nil {
			t.Fatalf("cluster line %q is not ./baton serve ... -data-dir DIR", l.cmd)
		}
		roots = append(roots, strings.Split(filepath.ToSlash(m[1]), "/")[0])
		startShell(t, dir, env, setP+"; "+remap(l.cmd))
	}
	root := roots[0]
	for _, r := range roots {
		if r != root || r == "." || r == ".." || filepath.IsAbs(r) {
			t.Fatalf("the nodes' data directories are not under one relative folder: %q", roots)
		}
	}
	// The folder is ignored by the repository, so a try leaves git clean.
	repo := filepath.Join("..", "..")
	if exec.Command("git", "-C", repo, "rev-parse", "--is-inside-work-tree").Run() != nil {
		t.Logf("not in a git work tree: the check that git ignores %s/ is left out", root)
	} else if err := exec.Command("git", "-C", repo, "check-ignore", "-q", root+"/n1/raft.db").Run(); err != nil {
		t.Errorf("git check-ignore %s/n1/raft.db: %v; want the README cluster's folder ignored", root, err)
	}

	var lines []string
	for _, l := range blocks[1] {
		lines = append(lines, remap(l.cmd))
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "sleep 30") || !strings.HasPrefix(lines[1], "./baton locks ") {
		t.Fatalf("the cluster's second block is not a baton run and a baton locks: %q", blocks[1])
	}
	// As the README says: baton cluster shows the leader, then clients go.
	clusterCmd := regexp.MustCompile("`(\\./baton cluster -ops-addr [^`]+)`").FindStringSubmatch(readmeSection(t, "A 3-node cluster on one machine"))
	if clusterCmd == nil {
		t.Fatal("the cluster section names no ./baton cluster -ops-addr command")
	}
	var out string
	batontest.Eventually(t, 60*time.Second, func() bool {
		cmd, stdout, _ := shellCmd(t, dir, env, remap(clusterCmd[1]))
		cmd.Run()
		out = stdout.String()
		return cmd.ProcessState.ExitCode() == 0 && strings.Contains(out, " leader ")
	}, "%q never showed a leader; last output %q", clusterCmd[1], out)
	startShell(t, dir, env, lines[0])
	batontest.Eventually(t, 60*time.Second, func() bool {
		cmd, stdout, _ := shellCmd(t, dir, env, lines[1])
		cmd.Run()
		out = stdout.String()
		return strings.Contains(out, "jobs/demo")
	}, "%q never listed jobs/demo; last output %q", lines[1], out)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "baton" && e.Name() != root {
			t.Errorf("the cluster wrote %q beside %s/: want everything under %s/", e.Name(), root, root)
		}
	}
}

// TestReadmeNodeOutsideTheRepository: the Node.js example installs in a
// directory of its own, never in the repository, where npm would write
// package.json and package-lock.json.
func TestReadmeNodeOutsideTheRepository(t *testing.T) {
	t.Parallel()
	blocks := shellBlocks(readmeSection(t, "From Python and Node.js"))
	var cwdRepo = true // the reader starts in the repository
	found := false
	for _, block := range blocks {
		for _, l := range block {
			if strings.HasPrefix(l.cmd, "cd ") || strings.Contains(l.cmd, "&& cd ") {
				cwdRepo = false
			}
			if strings.HasPrefix(l.cmd, "npm install") {
				found = true
				if cwdRepo {
					t.Errorf("%q runs in the repository: npm would write package.json there", l.cmd)
				}
			}
		}
	}
	if !found {
		t.Fatal("no npm install line in the README's Node.js example")
	}
}
