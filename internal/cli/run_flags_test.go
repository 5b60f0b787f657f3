package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/internal/runner"
)

func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // the one stderr line
	}{
		{"no name", nil, []string{"run"},
			"baton run: no lock name given (baton run [flags] NAME -- COMMAND [ARGS...]); run 'baton help run'"},
		{"no separator", nil, []string{"run", "jobs/x", "make", "deploy"},
			`baton run: missing "--" between the lock name and the command (baton run [flags] jobs/x -- make deploy); run 'baton help run'`},
		{"no command", nil, []string{"run", "jobs/x"}, `baton run: no command given after "--"; run 'baton help run'`},
		{"empty command", nil, []string{"run", "jobs/x", "--"}, `baton run: no command given after "--"; run 'baton help run'`},
		{"two names", nil, []string{"run", "a", "b", "--", "true"}, `baton run: unexpected argument "b" before "--": give one lock name; run 'baton help run'`},
		{"bad name", nil, []string{"run", "a\tb", "--", "true"}, "baton run: lock name "},
		{"lease 0", nil, []string{"run", "-lease", "0s", "x", "--", "true"}, "baton run: lease 0s is below baton run's minimum of 250ms: "},
		{"lease 1ms", nil, []string{"run", "-lease", "1ms", "x", "--", "true"},
			"baton run: lease 1ms is below baton run's minimum of 250ms: the server must confirm the lock every 0.8 × lease, " +
				"and a busy machine can keep a process from running for longer than that, which would stop the command at once; use -lease 250ms or more; run 'baton help run'"},
		{"lease without a unit", nil, []string{"run", "-lease", "10", "x", "--", "true"},
			`baton run: invalid value "10" for flag -lease: add a unit: 10s (or 10ms, 10m); run 'baton help run'`},
		{"wait without a unit", nil, []string{"run", "-wait", "2.5", "x", "--", "true"},
			`baton run: invalid value "2.5" for flag -wait: add a unit: 2.5s (or 2.5ms, 2.5m); run 'baton help run'`},
		{"kill-grace without a unit", nil, []string{"run", "-kill-grace", "3", "x", "--", "true"},
			`baton run: invalid value "3" for flag -kill-grace: add a unit: 3s (or 3ms, 3m); run 'baton help run'`},
		{"env lease without a unit", map[string]string{"BATON_LEASE": "30"}, []string{"run", "x", "--", "true"},
			`baton run: invalid value "30" for environment variable BATON_LEASE (flag -lease): add a unit: 30s (or 30ms, 30m); run 'baton help run'`},
		{"serve io-timeout without a unit", nil, []string{"serve", "-io-timeout", "5"},
			`baton serve: invalid value "5" for flag -io-timeout: add a unit: 5s (or 5ms, 5m); run 'baton help serve'`},
		{"serve max-lease without a unit", nil, []string{"serve", "-max-lease", "60"},
			`baton serve: invalid value "60" for flag -max-lease: add a unit: 60s (or 60ms, 60m); run 'baton help serve'`},
		{"serve raft timeout without a unit", nil, []string{"serve", "-raft-election-timeout", "1"},
			`baton serve: invalid value "1" for flag -raft-election-timeout: add a unit: 1s (or 1ms, 1m); run 'baton help serve'`},
		{"negative wait", nil, []string{"run", "-wait", "-1s", "x", "--", "true"}, "baton run: wait (-1s) must not be negative"},
		{"nowait and wait", nil, []string{"run", "-nowait", "-wait", "1s", "x", "--", "true"}, "baton run: -nowait and -wait exclude each other"},
		{"quiet and verbose", nil, []string{"run", "-q", "-v", "x", "--", "true"}, "baton run: -q and -v exclude each other"},
		{"negative kill-grace", nil, []string{"run", "-kill-grace", "-1s", "x", "--", "true"}, "baton run: kill-grace (-1s) must not be negative"},
		{"bad addr", nil, []string{"run", "-addr", "nope", "x", "--", "true"}, `baton run: invalid value "nope" for flag -addr: "nope" is not host:port`},
		{"bad owner", nil, []string{"run", "-owner", "a\x01", "x", "--", "true"}, `baton run: invalid value "a\x01" for flag -owner: owner`},
		{"bad ops-addr", nil, []string{"run", "-ops-addr", "nope", "x", "--", "true"}, `baton run: ops-addr "nope" is not host:port`},
		{"unknown flag", nil, []string{"run", "-frob", "x", "--", "true"}, "baton run: flag provided but not defined: -frob"},
		{"bad env", map[string]string{"BATON_LEASE": "soon"}, []string{"run", "x", "--", "true"},
			`baton run: invalid value "soon" for environment variable BATON_LEASE (flag -lease): not a duration: write a number and a unit, such as 500ms, 10s, 5m or 1h30m; run 'baton help run'`},
		{"env nowait and wait", map[string]string{"BATON_NOWAIT": "true", "BATON_WAIT": "1m"}, []string{"run", "x", "--", "true"},
			"baton run: -nowait and -wait exclude each other"},
		{"locks two names", nil, []string{"locks", "a", "b"}, `baton locks: unexpected argument "b": give one lock name; run 'baton help locks'`},
		{"release no name", nil, []string{"release"}, "baton release: no lock name given (or -session ID for one holder); run 'baton help release'"},
		{"release a name and a session", nil, []string{"release", "pool", "-session", "4"},
			`baton release: give a lock name (every holder) or -session ID (one holder), not both: "pool" and -session 4; run 'baton help release'`},
		{"release a session that is no number", nil, []string{"release", "-session", "pool"},
			`baton release: session ids are numbers, as 'baton locks NAME' lists them: "pool" is not one; run 'baton help release'`},
		{"-session on locks", nil, []string{"locks", "-session", "4"}, "baton locks: flag provided but not defined: -session"},
		{"limit 0", nil, []string{"run", "-limit", "0", "x", "--", "true"},
			`baton run: invalid value "0" for flag -limit: a limit is a whole number from 1 to 65535; run 'baton help run'`},
		{"limit too large", nil, []string{"run", "-limit", "65536", "x", "--", "true"},
			`baton run: invalid value "65536" for flag -limit: a limit is a whole number from 1 to 65535; run 'baton help run'`},
		{"limit not a number", nil, []string{"run", "-limit", "three", "x", "--", "true"},
			`baton run: invalid value "three" for flag -limit: a limit is a whole number from 1 to 65535; run 'baton help run'`},
		{"env limit", map[string]string{"BATON_LIMIT": "-2"}, []string{"run", "x", "--", "true"},
			`baton run: invalid value "-2" for environment variable BATON_LIMIT (flag -limit): a limit is a whole number from 1 to 65535; run 'baton help run'`},
		{"limit and shared", nil, []string{"run", "-limit", "3", "-shared", "x", "--", "true"},
			"baton run: -limit and -shared exclude each other: -limit 3 takes a slot of a semaphore of 3, -shared is a reader (of the readers' limit, 65535); run 'baton help run'"},
		{"env shared and limit", map[string]string{"BATON_SHARED": "1"}, []string{"run", "-limit", "3", "x", "--", "true"},
			"baton run: -limit and -shared exclude each other"},
		{"kick no id", nil, []string{"kick"}, "baton kick: no session id given; run 'baton help kick'"},
		{"kick a name", nil, []string{"kick", "abc"}, `baton kick: session ids are numbers, as 'baton locks NAME' lists them: "abc" is not one; run 'baton help kick'`},
		{"kick a negative id", nil, []string{"kick", "--", "-3"}, `baton kick: session ids are numbers, as 'baton locks NAME' lists them: "-3" is not one; run 'baton help kick'`},
		{"kick bad ops-addr", nil, []string{"kick", "-ops-addr", "ftp://x", "1"}, `baton kick: ops-addr "ftp://x" is not host:port or an http(s) URL`},
		{"locks bad flag", nil, []string{"locks", "-x"}, "baton locks: flag provided but not defined: -x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tt.env, tt.args...)
			if code != exitUsage {
				t.Errorf("exit code %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if l := lines(stderr); len(l) != 1 || !strings.HasPrefix(l[0], tt.want) {
				t.Errorf("stderr %q, want one line starting %q", stderr, tt.want)
			}
		})
	}
}

// TestRunCommandNotFoundInProcess: the command is looked up before the
// lock is asked for, so no server is needed to learn of a typo.
func TestRunCommandNotFoundInProcess(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, nil, "run", "-addr", "127.0.0.1:1", "x", "--", "no-such-command-baton-test")
	if code != runner.ExitCmdNotFound || stderr != "baton run: no-such-command-baton-test: command not found\n" {
		t.Errorf("exit code %d, stderr %q; want 127 and the not-found line", code, stderr)
	}
}

func TestParseRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(t *testing.T, o runOptions)
	}{
		{"defaults", nil, []string{"jobs/x", "--", "echo", "hi"}, func(t *testing.T, o runOptions) {
			if !slices.Equal(o.addrs.addrs, []string{"127.0.0.1:7070"}) || o.lease != 10*time.Second || o.noWait ||
				o.wait != 0 || o.killGrace != time.Second || o.killGraceFlag.set || o.verbose || o.opsAddr != defaultOpsAddr || o.owner.set {
				t.Errorf("options %+v, want the defaults", o)
			}
			if o.name != "jobs/x" || !slices.Equal(o.command, []string{"echo", "hi"}) {
				t.Errorf("name %q, command %q", o.name, o.command)
			}
		}},
		{"flags after the name, and in the command", nil,
			[]string{"-lease", "2s", "jobs/x", "-nowait", "-v", "--", "ls", "-l", "--", "-v"}, func(t *testing.T, o runOptions) {
				if o.lease != 2*time.Second || !o.noWait || !o.verbose {
					t.Errorf("lease %v nowait %v v %v, want 2s true true", o.lease, o.noWait, o.verbose)
				}
				if !slices.Equal(o.command, []string{"ls", "-l", "--", "-v"}) {
					t.Errorf("command %q, want everything after the first --", o.command)
				}
			}},
		// One default everywhere: baton locks' 127.0.0.1:7071, asked only
		// when the lock server is on this machine too.
		{"the ops API's default beside a remote -addr", nil, []string{"-addr", "baton.internal:7070", "x", "--", "true"}, func(t *testing.T, o runOptions) {
			if o.opsAddr != "" || !strings.Contains(o.opsAddrNote, "give -ops-addr") {
				t.Errorf("ops-addr %q (note %q), want none and a note that says to give -ops-addr", o.opsAddr, o.opsAddrNote)
			}
		}},
		{"the ops API given beside a remote -addr", map[string]string{"BATON_OPS_ADDR": "baton.internal:7071"},
			[]string{"-addr", "baton.internal:7070", "x", "--", "true"}, func(t *testing.T, o runOptions) {
				if o.opsAddr != "baton.internal:7071" {
					t.Errorf("ops-addr %q, want BATON_OPS_ADDR's", o.opsAddr)
				}
			}},
		{"the client's TLS files from the environment, as security.md exports them",
			map[string]string{"BATON_TLS_CA": "ca.crt", "BATON_TLS_CERT": "worker.crt", "BATON_TLS_KEY": "worker.key"},
			[]string{"x", "--", "true"}, func(t *testing.T, o runOptions) {
				if o.tls.ca != "ca.crt" || o.tls.cert != "worker.crt" || o.tls.key != "worker.key" {
					t.Errorf("tls %+v, want the files of the environment", o.tls)
				}
			}},
		{"addresses repeated and with commas", nil,
			[]string{"-addr", "a:1,b:2", "-addr", "c:3", "x", "--", "true"}, func(t *testing.T, o runOptions) {
				if want := []string{"a:1", "b:2", "c:3"}; !slices.Equal(o.addrs.addrs, want) {
					t.Errorf("addrs %q, want %q", o.addrs.addrs, want)
				}
			}},
		{"environment", map[string]string{
			"BATON_ADDR": "e:1, f:2", "BATON_LEASE": "3s", "BATON_WAIT": "1m", "BATON_OWNER": "cron@web1",
			"BATON_KILL_GRACE": "2s", "BATON_V": "true", "BATON_OPS_ADDR": "127.0.0.1:7071",
		}, []string{"x", "--", "true"}, func(t *testing.T, o runOptions) {
			if !slices.Equal(o.addrs.addrs, []string{"e:1", "f:2"}) || o.lease != 3*time.Second || o.wait != time.Minute ||
				o.owner.get() != "cron@web1" || o.killGrace != 2*time.Second || !o.verbose || o.opsAddr != "127.0.0.1:7071" {
				t.Errorf("options %+v, want those of the environment", o)
			}
		}},
		{"resume by default", nil, []string{"x", "--", "true"}, func(t *testing.T, o runOptions) {
			if !o.resume {
				t.Errorf("resume %v, want true", o.resume)
			}
		}},
		{"resume off", map[string]string{"BATON_RESUME": "false"}, []string{"x", "--", "true"}, func(t *testing.T, o runOptions) {
			if o.resume {
				t.Errorf("resume %v, want false from BATON_RESUME", o.resume)
			}
		}},
		{"exclusive by default", nil, []string{"x", "--", "true"}, func(t *testing.T, o runOptions) {
			if o.limit.set || o.shared {
				t.Errorf("limit %+v shared %v, want an exclusive claim", o.limit, o.shared)
			}
		}},
		{"limit", nil, []string{"-limit", "65535", "x", "--", "true"}, func(t *testing.T, o runOptions) {
			if !o.limit.set || o.limit.n != 65535 || o.shared {
				t.Errorf("limit %+v shared %v, want a slot of 65535", o.limit, o.shared)
			}
		}},
		{"limit and shared from the environment", map[string]string{"BATON_LIMIT": "4"}, []string{"x", "--", "true"}, func(t *testing.T, o runOptions) {
			if !o.limit.set || o.limit.n != 4 {
				t.Errorf("limit %+v, want 4 from BATON_LIMIT", o.limit)
			}
		}},
		{"shared from the environment", map[string]string{"BATON_SHARED": "true"}, []string{"x", "--", "true"}, func(t *testing.T, o runOptions) {
			if !o.shared || o.limit.set {
				t.Errorf("shared %v limit %+v, want a reader from BATON_SHARED", o.shared, o.limit)
			}
		}},
		{"kill-grace follows the lease", nil, []string{"-lease", "400ms", "x", "--", "true"}, func(t *testing.T, o runOptions) {
			if o.killGrace != 40*time.Millisecond {
				t.Errorf("kill-grace %v with a 400ms lease, want 40ms (lease/10)", o.killGrace)
			}
		}},
		{"kill-grace given", nil, []string{"-lease", "400ms", "-kill-grace", "0s", "x", "--", "true"}, func(t *testing.T, o runOptions) {
			if o.killGrace != 0 {
				t.Errorf("kill-grace %v, want 0s as given", o.killGrace)
			}
		}},
		{"command line wins", map[string]string{"BATON_ADDR": "e:1", "BATON_LEASE": "3s"},
			[]string{"-addr", "c:1", "x", "--", "true"}, func(t *testing.T, o runOptions) {
				if !slices.Equal(o.addrs.addrs, []string{"c:1"}) || o.lease != 3*time.Second {
					t.Errorf("addrs %q lease %v, want [c:1] 3s", o.addrs.addrs, o.lease)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut batontest.SyncBuffer
			s := &sys{stdout: &out, stderr: &errOut, lookupEnv: fakeEnv(tt.env)}
			o, code, ok := parseRun(s, runCommand(), tt.args)
			if !ok {
				t.Fatalf("parseRun: exit code %d, stderr %q", code, errOut.String())
			}
			tt.check(t, o)
		})
	}
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runCLI(t, nil, "--help")
	for _, c := range []string{"run", "locks", "release", "kick"} {
		if code != 0 || !strings.Contains(stdout, "\n  "+c+" ") {
			t.Errorf("baton --help does not list %s:\n%s", c, stdout)
		}
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"help", "run"}, []string{
			"Usage: baton run [flags] NAME -- COMMAND [ARGS...]",
			"(default 127.0.0.1:7070, $BATON_ADDR)", "(default hostname:pid, $BATON_OWNER)", "$BATON_KILL_GRACE",
			"BATON_TOKEN", "*/5 * * * * baton run -nowait", `$BATON_TOKEN`, "75 ", "76 ", "77 ", "78 ", "127"}},
		{[]string{"run", "-h"}, []string{"Usage: baton run"}},
		{[]string{"help", "locks"}, []string{"Usage: baton locks [flags] [NAME]", "(default 127.0.0.1:7071, $BATON_OPS_ADDR)", "BATON_ADMIN_TOKEN", "-json"}},
		{[]string{"help", "release"}, []string{"Usage: baton release [flags] NAME", "baton release jobs/nightly"}},
		{[]string{"kick", "--help"}, []string{"Usage: baton kick [flags] SESSION", "baton kick 17"}},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(t, nil, tt.args...)
		if code != 0 || stderr != "" {
			t.Errorf("baton %q: exit code %d, stderr %q", tt.args, code, stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("baton %q lacks %q:\n%s", tt.args, w, stdout)
			}
		}
	}
}
