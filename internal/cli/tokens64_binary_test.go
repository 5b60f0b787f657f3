package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBinaryTokensKeepEveryBit: at epoch 2^23+1 (tokens past 2^63, so far
// past 2^53) and at the last one (2^24-1), the token of a
// grant is the same to the last digit in every place it leaves the server
// as text: BATON_TOKEN, GET /v1/locks (token and token_str), baton locks,
// baton watch and baton watch -json, the fence check (its neighbours are
// not current) and baton release.
func TestBinaryTokensKeepEveryBit(t *testing.T) {
	t.Parallel()
	for _, epoch := range []uint64{1<<23 + 1, 1<<24 - 1} {
		t.Run(fmt.Sprint("epoch ", epoch), func(t *testing.T) {
			dataDir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dataDir, "epoch"), []byte(strconv.FormatUint(epoch-1, 10)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, sl := startServeBinaryLine(t, dataDir)
			if sl.Epoch != epoch {
				t.Fatalf("serving at epoch %d, want %d", sl.Epoch, epoch)
			}
			want := strconv.FormatUint(epoch<<40|1, 10) // the epoch's first grant
			const name = "tok/a"

			watchJSON := startLines(t, batonCmd(t, "watch", "-json", "-ops-addr", sl.OpsAddr, name))
			watchText := startLines(t, batonCmd(t, "watch", "-ops-addr", sl.OpsAddr, name))
			// Each watch says on stderr when it follows; give both a moment
			// by waiting for the server to count their streams.
			waitStreams(t, sl.OpsAddr, 2)

			dir := t.TempDir()
			run := batonCmd(t, "run", "-addr", sl.Addr, name, "--", "sh", "-c", `echo "$BATON_TOKEN" > token.tmp && mv token.tmp token && exec sleep 60`)
			run.Dir = dir
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { run.Process.Kill(); run.Wait() })
			if got := strings.TrimSpace(readFileWhenThere(t, filepath.Join(dir, "token"))); got != want {
				t.Errorf("BATON_TOKEN %s, want %s", got, want)
			}

			body := opsGet(t, sl.OpsAddr, "/v1/locks/tok%2Fa", 200)
			var lock struct {
				Holder struct {
					Token    json.Number `json:"token"`
					TokenStr string      `json:"token_str"`
				} `json:"holder"`
			}
			dec := json.NewDecoder(strings.NewReader(body))
			dec.UseNumber()
			if err := dec.Decode(&lock); err != nil {
				t.Fatal(err)
			}
			if lock.Holder.TokenStr != want || lock.Holder.Token.String() != want {
				t.Errorf("GET /v1/locks/tok%%2Fa: token %s, token_str %q, want %s in both (%s)", lock.Holder.Token, lock.Holder.TokenStr, want, body)
			}

			out, err := batonCmd(t, "locks", "-ops-addr", sl.OpsAddr).CombinedOutput()
			if err != nil || !containsField(string(out), want) {
				t.Errorf("baton locks: %v\n%s\nwant the token %s", err, out, want)
			}

			if line := watchJSON.until(t, `"type":"granted"`); !strings.Contains(line, `"token_str":"`+want+`"`) || !strings.Contains(line, `"token":`+want+`,`) {
				t.Errorf("baton watch -json: %s\nwant token and token_str %s", line, want)
			}
			if line := watchText.until(t, "granted"); !strings.Contains(line, " token="+want+" ") {
				t.Errorf("baton watch: %s\nwant token=%s", line, want)
			}

			n, _ := strconv.ParseUint(want, 10, 64)
			opsGet(t, sl.OpsAddr, "/v1/locks/tok%2Fa/fence?token="+want, 200)
			for _, other := range []uint64{n - 1, n + 1} {
				opsGet(t, sl.OpsAddr, "/v1/locks/tok%2Fa/fence?token="+strconv.FormatUint(other, 10), 409)
			}

			out, err = batonCmd(t, "release", "-ops-addr", sl.OpsAddr, name).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "token "+want+",") {
				t.Errorf("baton release: %v\n%s\nwant token %s", err, out, want)
			}
		})
	}
}

// containsField reports whether out has want as a whole
// whitespace-separated field.
func containsField(out, want string) bool {
	for _, f := range strings.Fields(out) {
		if f == want {
			return true
		}
	}
	return false
}

func opsGet(t *testing.T, opsAddr, path string, status int) string {
	t.Helper()
	resp, err := http.Get("http://" + opsAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, b, status)
	}
	return string(b)
}

// waitStreams waits until the server counts n open event streams.
func waitStreams(t *testing.T, opsAddr string, n int) {
	t.Helper()
	want := fmt.Sprintf("baton_ops_event_streams %d", n)
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get("http://" + opsAddr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte(want)) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in /metrics within 10s", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lineStream is the stdout of a command, a line at a time.
type lineStream struct{ c chan string }

func startLines(t *testing.T, cmd *exec.Cmd) *lineStream {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &lineStream{c: make(chan string, 100)}
	go func() { // ends when the command is killed
		defer close(l.c)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case l.c <- sc.Text():
			default: // nobody reads any more
			}
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return l
}

// until returns the first line that contains s, within 10s.
func (l *lineStream) until(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-l.c:
			if !ok {
				t.Fatalf("the command ended before a line with %q", s)
			}
			if strings.Contains(line, s) {
				return line
			}
		case <-timeout:
			t.Fatalf("no line with %q within 10s", s)
		}
	}
}
