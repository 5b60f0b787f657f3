package cli

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testcerts"
)

// serviceUID stands for the user DynamicUser= allocates: a uid with no
// entry in /etc/passwd and no groups, which owns nothing but what systemd
// gives it.
const serviceUID = 61871

// unitService is the [Service] section of a unit and its drop-ins: the
// lines this test acts on, in order.
type unitService struct {
	execStart   []string
	environment []string // KEY=VALUE, as written
	credentials [][2]string
}

func parseUnit(t *testing.T, files ...string) unitService {
	t.Helper()
	var u unitService
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		section := ""
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if strings.HasPrefix(line, "[") {
				section = line
				continue
			}
			key, val, ok := strings.Cut(line, "=")
			if !ok || section != "[Service]" {
				continue
			}
			switch key {
			case "ExecStart":
				u.execStart = strings.Fields(val)
			case "Environment":
				u.environment = append(u.environment, strings.Fields(val)...)
			case "LoadCredential":
				id, path, ok := strings.Cut(val, ":")
				if !ok {
					t.Fatalf("%s: LoadCredential=%s is not ID:PATH", f, val)
				}
				u.credentials = append(u.credentials, [2]string{id, path})
			}
		}
	}
	return u
}

// TestSystemdUnitAsServiceUser: deploy/systemd/baton.service with its TLS
// drop-in, run as systemd would run it, by the service's own user: the
// files made as the docs' checklist says (root's, 0600, under a 0700
// /etc/baton), the credentials copied as LoadCredential= copies them (a
// directory and files only that user can read), the state directory its
// own, and the unit's Environment= and ExecStart= with %d and
// ${STATE_DIRECTORY} expanded. The server must start with the admin token
// and TLS, answer /v1/ with the token, and stop on SIGTERM with 0. The
// same user reading the checklist's file directly is refused: the reason
// the unit uses credentials. systemd-analyze verify checks the unit's
// syntax in CI (.ci/packaging.sh); it cannot run a service here.
func TestSystemdUnitAsServiceUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the systemd unit is tried as its service user (another uid), which needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("setpriv (util-linux) is not installed: the unit cannot be tried as its user (CI=%s)", os.Getenv("CI"))
		}
		t.Skip("SKIPPED: setpriv (util-linux) is not installed, so the unit was not tried as its user")
	}
	bin := buildBaton(t)
	root, err := os.MkdirTemp("", "baton-unit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mkdir := func(p string, mode os.FileMode, uid int) string {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(p, 0o755); err != nil { // parents open, as /run and /var/lib are
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(p string, data []byte, mode os.FileMode, uid int) {
		t.Helper()
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	// The binary where the unit names it, executable by anyone.
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	mkdir("usr/local/bin", 0o755, 0)
	write(filepath.Join(root, "usr/local/bin/baton"), exe, 0o755, 0)

	// The checklist: /etc/baton 0700, the token and the TLS files root's 0600.
	etc := mkdir("etc/baton", 0o700, 0)
	mkdir("etc/baton/tls", 0o700, 0)
	token := fmt.Sprintf("%032x", time.Now().UnixNano()) // 32 characters: the shortest token baton serve takes
	write(filepath.Join(etc, "admin-token"), []byte(token+"\n"), 0o600, 0)
	ca := testcerts.NewCA(t, "unit CA")
	leaf := ca.Server(t)
	write(filepath.Join(etc, "tls/node.crt"), leaf.CertPEM, 0o600, 0)
	write(filepath.Join(etc, "tls/node.key"), leaf.KeyPEM, 0o600, 0)
	write(filepath.Join(etc, "tls/ca.crt"), ca.PEM, 0o600, 0)

	repo := filepath.Join("..", "..", "deploy", "systemd")
	u := parseUnit(t, filepath.Join(repo, "baton.service"), filepath.Join(repo, "tls.conf"))
	if len(u.execStart) == 0 || len(u.credentials) == 0 {
		t.Fatalf("unit: ExecStart %q, LoadCredential %q: want both", u.execStart, u.credentials)
	}

	// What systemd does at start: the credentials copied by root into a
	// directory of the service user's, the state directory made its own.
	creds := mkdir("run/credentials/baton.service", 0o500, serviceUID)
	for _, c := range u.credentials {
		data, err := os.ReadFile(filepath.Join(root, c[1]))
		if err != nil {
			t.Fatalf("LoadCredential=%s:%s: %v (the checklist makes this file)", c[0], c[1], err)
		}
		write(filepath.Join(creds, c[0]), data, 0o400, serviceUID)
	}
	state := mkdir("var/lib/baton", 0o700, serviceUID)
	expand := func(s string) string {
		s = strings.ReplaceAll(s, "%d", creds)
		s = strings.ReplaceAll(s, "${STATE_DIRECTORY}", state)
		s = strings.ReplaceAll(s, "=/etc/baton/", "="+filepath.Join(root, "etc/baton")+"/")
		if strings.HasPrefix(s, "/usr/local/bin/") {
			s = filepath.Join(root, s)
		}
		return s
	}
	env := []string{"PATH=/usr/bin:/bin", "STATE_DIRECTORY=" + state, "CREDENTIALS_DIRECTORY=" + creds,
		// What /etc/baton/baton.env would hold on a test machine.
		"BATON_ADDR=127.0.0.1:0", "BATON_OPS_ADDR=127.0.0.1:0", "BATON_LOG_FORMAT=json", "BATON_SHUTDOWN_LINGER=0s"}
	for _, kv := range u.environment {
		env = append(env, expand(kv))
	}
	var argv []string
	for _, a := range u.execStart {
		argv = append(argv, expand(a))
	}
	asUser := func(argv []string, env []string) *exec.Cmd {
		id := strconv.Itoa(serviceUID)
		cmd := exec.Command(setpriv, append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", "--"}, argv...)...)
		cmd.Env, cmd.Dir = env, "/"
		return cmd
	}

	cmd := asUser(argv, env)
	l := startLogged(t, cmd)
	var serving struct {
		Msg        string `json:"msg"`
		OpsAddr    string `json:"ops_addr"`
		AdminToken bool   `json:"admin_token"`
		TLS        string `json:"tls"`
	}
	for serving.Msg != "baton serving" {
		line, ok := l.next()
		if !ok {
			t.Fatalf("the unit's command as uid %d did not start; its log:\n%s", serviceUID, strings.Join(l.seen, "\n"))
		}
		serving.Msg = ""
		json.Unmarshal([]byte(line), &serving)
	}
	if !serving.AdminToken || serving.TLS != "on" {
		t.Errorf("serving with admin_token %v and tls %q, want the token and TLS from the credentials", serving.AdminToken, serving.TLS)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", serviceUID, serviceUID, serviceUID, serviceUID)) {
		t.Errorf("the server does not run as uid %d:\n%s", serviceUID, status)
	}
	// The ops API speaks TLS with the credential's certificate and takes
	// the credential's token.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	for _, tc := range []struct {
		token string
		want  int
	}{{token, http.StatusOK}, {"", http.StatusUnauthorized}} {
		req, _ := http.NewRequest("GET", "https://"+serving.OpsAddr+"/v1/locks", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /v1/locks with token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-l.waited:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit 0", err)
		}
		l.waited <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("still running 20 s after SIGTERM")
	}
	if entries, err := os.ReadDir(state); err != nil || len(entries) == 0 {
		t.Errorf("the state directory holds %d entries (%v): the server wrote nothing there", len(entries), err)
	}

	// The premise: the same user cannot read the checklist's file itself.
	direct := asUser([]string{argv[0], "serve", "-data-dir", state}, []string{"PATH=/usr/bin:/bin",
		"BATON_ADDR=127.0.0.1:0", "BATON_OPS_ADDR=127.0.0.1:0", "BATON_ADMIN_TOKEN_FILE=" + filepath.Join(etc, "admin-token")})
	out, err := direct.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Errorf("uid %d reading %s itself: %v, %q; want permission denied", serviceUID, filepath.Join(etc, "admin-token"), err, firstLine(out))
	} else {
		t.Logf("without credentials, as the checklist's files are: %s", firstLine(out))
	}
}

func firstLine(b []byte) string {
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	if sc.Scan() {
		return sc.Text()
	}
	return ""
}
