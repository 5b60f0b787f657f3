package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
)

func TestServeUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // on the one stderr line
	}{
		{"bad duration", []string{"-io-timeout=x"}, nil, `baton serve: invalid value "x" for flag -io-timeout: not a duration: write a number and a unit, such as 500ms, 10s, 5m or 1h30m; run 'baton help serve'`},
		{"unknown flag", []string{"-nope"}, nil, "baton serve: flag provided but not defined: -nope; run 'baton help serve'"},
		{"missing value", []string{"-addr"}, nil, "flag needs an argument: -addr"},
		{"stray argument", []string{"extra"}, nil, `baton serve: unexpected argument "extra"; run 'baton help serve'`},
		{"argument after flags", []string{"-io-timeout=1s", "extra"}, nil, `unexpected argument "extra"`},
		{"zero io-timeout", []string{"-io-timeout=0s"}, nil, "baton serve: io-timeout (0s) must be positive; run 'baton help serve'"},
		{"negative io-timeout", []string{"-io-timeout", "-1s"}, nil, "io-timeout (-1s) must be positive"},
		{"bad int", []string{"-max-sessions=many"}, nil, `invalid value "many" for flag -max-sessions: parse error`},
		{"zero max-sessions", []string{"-max-sessions=0"}, nil, "max-sessions (0) must be positive"},
		{"negative max-waiters", []string{"-max-waiters=-1"}, nil, "max-waiters (-1) must be positive"},
		{"negative linger", []string{"-shutdown-linger=-1s"}, nil, "shutdown-linger (-1s) must not be negative"},
		{"negative send-buffer", []string{"-send-buffer=-1"}, nil, "send-buffer (-1) must not be negative"},
		{"zero ops-max-conns", []string{"-ops-max-conns=0"}, nil, "ops-max-conns (0) must be positive"},
		{"negative ops-max-conns-per-ip", []string{"-ops-max-conns-per-ip=-1"}, nil, "ops-max-conns-per-ip (-1) must not be negative"},
		{"negative max-conns-per-identity", []string{"-max-conns-per-identity=-1"}, nil, "max-conns-per-identity (-1) must not be negative"},
		{"negative reserve-fds", []string{"-reserve-fds=-1"}, nil, "reserve-fds (-1) must not be negative"},
		{"negative metrics-lock-names", []string{"-metrics-lock-names=-1"}, nil, "metrics-lock-names (-1) must not be negative"},
		{"bad park-idle", []string{"-park-idle=maybe"}, nil, `invalid boolean value "maybe" for -park-idle`},
		{"negative crash-grace-max", []string{"-crash-grace-max=-1s"}, nil, "crash-grace-max (-1s) must not be negative"},
		{"negative max-lease", []string{"-max-lease=-1s"}, nil, "max-lease (-1s) must not be negative"},
		{"bad max-lease", []string{"-max-lease=10"}, nil, `invalid value "10" for flag -max-lease`},
		{"bad log format", []string{"-log-format=xml"}, nil, `invalid value "xml" for flag -log-format: must be one of text, json`},
		{"bad log level", []string{"-log-level=loud"}, nil, `invalid value "loud" for flag -log-level: must be one of debug, info, warn, error`},
		{"addr without port", []string{"-addr=localhost"}, nil, `addr "localhost" is not host:port`},
		{"ops-addr without port", []string{"-ops-addr=127.0.0.1"}, nil, `ops-addr "127.0.0.1" is not host:port`},
		{"empty data-dir", []string{"-data-dir="}, nil, "data-dir must not be empty"},
		{"ops on all interfaces, no token", []string{"-ops-addr=0.0.0.0:0"}, nil, "ops-addr 0.0.0.0:0 is not a loopback address and no admin-token-file is given"},
		{"ops on empty host, no token", []string{"-ops-addr=:0"}, nil, "ops-addr :0 is not a loopback address"},
		{"ops on ::, no token", []string{"-ops-addr=[::]:0"}, nil, "is not a loopback address"},
		{"ops on a name, no token", []string{"-ops-addr=example.com:0"}, nil, "is not a loopback address"},
		{"bad env duration", nil, map[string]string{"BATON_IO_TIMEOUT": "soon"},
			`baton serve: invalid value "soon" for environment variable BATON_IO_TIMEOUT (flag -io-timeout): not a duration: write a number and a unit, such as 500ms, 10s, 5m or 1h30m; run 'baton help serve'`},
		{"empty env duration", nil, map[string]string{"BATON_SHUTDOWN_LINGER": ""}, `invalid value "" for environment variable BATON_SHUTDOWN_LINGER`},
		{"bad env int", nil, map[string]string{"BATON_MAX_WAITERS": "1e3"}, `invalid value "1e3" for environment variable BATON_MAX_WAITERS`},
		{"bad env log format", nil, map[string]string{"BATON_LOG_FORMAT": "xml"}, "BATON_LOG_FORMAT (flag -log-format): must be one of text, json"},
		{"bad env value is checked", nil, map[string]string{"BATON_IO_TIMEOUT": "0s"}, "io-timeout (0s) must be positive"},
		{"env ops-addr, no token", nil, map[string]string{"BATON_OPS_ADDR": "0.0.0.0:0"}, "ops-addr 0.0.0.0:0 is not a loopback address"},
		{"flag beats a good env value", []string{"-io-timeout=0s"}, map[string]string{"BATON_IO_TIMEOUT": "1s"}, "io-timeout (0s) must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A data directory that a usage error must not create.
			dataDir := filepath.Join(t.TempDir(), "data")
			env := map[string]string{"BATON_DATA_DIR": dataDir}
			for k, v := range tt.env {
				env[k] = v
			}
			code, stdout, stderr := runCLI(t, env, append([]string{"serve"}, tt.args...)...)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if l := lines(stderr); len(l) != 1 || !strings.Contains(l[0], tt.want) {
				t.Errorf("stderr %q, want one line with %q", stderr, tt.want)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data directory exists after a usage error (stat: %v)", err)
			}
		})
	}
}

func TestServeFlagsAndEnv(t *testing.T) {
	t.Parallel()
	defaults := serveOptions{
		addr: "127.0.0.1:7070", opsAddr: "127.0.0.1:7071", ioTimeout: 5 * time.Second,
		dataDir: "baton-data", shutdownLinger: 2 * time.Second, maxSessions: 250000, maxWaiters: 10000,
		crashGraceMax: time.Minute, logFormat: "text", logLevel: "info", parkIdle: true, sendBuffer: 16384,
		opsMaxConns: 256, opsMaxConnsIP: 32, reserveFDs: 32,
		sec: securityOptions{maxConnsPerIP: 1024, maxConnsPerIdentity: 4096, maxPendingHandshakes: 1024, handshakeRate: 64,
			ipv4Prefix: 32, ipv6Prefix: 64},
		cl: clusterOptions{heartbeatTimeout: 200 * time.Millisecond, electionTimeout: 200 * time.Millisecond,
			leaderLeaseTimeout: 200 * time.Millisecond, handoverDrain: time.Second},
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(o *serveOptions)
	}{
		{"defaults", nil, nil, func(o *serveOptions) {}},
		{"every flag", []string{
			"-addr=127.0.0.2:1", "-ops-addr", "[::1]:2", "-io-timeout=1500ms", "-data-dir=/d",
			"-admin-token-file=/t", "-shutdown-linger=0s", "-max-sessions=3", "-max-waiters=4",
			"-log-format=JSON", "-log-level=debug", "-crash-grace-max=5s", "-park-idle=false", "-send-buffer=8192",
			"-tcp-fastopen", "-metrics-lock-names=50", "-ops-max-conns=9", "-ops-max-conns-per-ip=5", "-reserve-fds=3",
		}, nil, func(o *serveOptions) {
			*o = serveOptions{
				addr: "127.0.0.2:1", opsAddr: "[::1]:2", ioTimeout: 1500 * time.Millisecond, dataDir: "/d",
				adminTokenFile: "/t", shutdownLinger: 0, maxSessions: 3, maxWaiters: 4,
				crashGraceMax: 5 * time.Second, logFormat: "json", logLevel: "debug", parkIdle: false, sendBuffer: 8192,
				tcpFastOpen: true, metricsLocks: 50, opsMaxConns: 9, opsMaxConnsIP: 5, reserveFDs: 3,
			}
		}},
		{"every variable", nil, map[string]string{
			"BATON_ADDR": "127.0.0.2:1", "BATON_OPS_ADDR": "[::1]:2", "BATON_IO_TIMEOUT": "1500ms",
			"BATON_DATA_DIR": "/d", "BATON_ADMIN_TOKEN_FILE": "/t", "BATON_SHUTDOWN_LINGER": "0s",
			"BATON_MAX_SESSIONS": "3", "BATON_MAX_WAITERS": "4", "BATON_LOG_FORMAT": "json", "BATON_LOG_LEVEL": "WARN",
			"BATON_CRASH_GRACE_MAX": "0s", "BATON_PARK_IDLE": "false", "BATON_SEND_BUFFER": "0",
			"BATON_TCP_FASTOPEN": "true",
		}, func(o *serveOptions) {
			*o = serveOptions{
				addr: "127.0.0.2:1", opsAddr: "[::1]:2", ioTimeout: 1500 * time.Millisecond, dataDir: "/d",
				adminTokenFile: "/t", shutdownLinger: 0, maxSessions: 3, maxWaiters: 4,
				crashGraceMax: 0, logFormat: "json", logLevel: "warn", parkIdle: false, sendBuffer: 0,
				tcpFastOpen: true, opsMaxConns: 256, opsMaxConnsIP: 32, reserveFDs: 32,
			}
		}},
		{"flag beats env", []string{"-io-timeout=2s", "-log-level", "error"},
			map[string]string{"BATON_IO_TIMEOUT": "1s", "BATON_LOG_LEVEL": "debug", "BATON_MAX_WAITERS": "7"},
			func(o *serveOptions) { o.ioTimeout, o.logLevel, o.maxWaiters = 2*time.Second, "error", 7 }},
		{"handshake and source flags", []string{"-max-pending-handshakes=7", "-handshake-rate-per-ip=2.5", "-ipv4-prefix=24"},
			map[string]string{"BATON_IPV6_PREFIX": "56"},
			func(o *serveOptions) {
				o.sec.maxPendingHandshakes, o.sec.handshakeRate, o.sec.ipv4Prefix, o.sec.ipv6Prefix = 7, 2.5, 24, 56
			}},
		{"flag beats a bad env value", []string{"-io-timeout=2s"}, map[string]string{"BATON_IO_TIMEOUT": "garbage"},
			func(o *serveOptions) { o.ioTimeout = 2 * time.Second }},
		{"other variables are ignored", nil, map[string]string{"IO_TIMEOUT": "1s", "BATON_IOTIMEOUT": "1s", "baton_io_timeout": "1s"},
			func(o *serveOptions) {}},
		{"cluster flags and variables", []string{"-node-id=n1", "-raft-leader-lease-timeout=100ms", "-join"},
			map[string]string{"BATON_RAFT_ADDR": "127.0.0.1:7301", "BATON_PEERS": "n2=127.0.0.1:7302", "BATON_ADVERTISE_ADDR": "10.0.0.1:7070",
				"BATON_ADVERTISE_OPS_ADDR": "10.0.0.1:7071", "BATON_RAFT_HEARTBEAT_TIMEOUT": "1s", "BATON_RAFT_ELECTION_TIMEOUT": "2s", "BATON_HANDOVER_DRAIN": "3s"},
			func(o *serveOptions) {
				o.cl = clusterOptions{nodeID: "n1", raftAddr: "127.0.0.1:7301", peers: "n2=127.0.0.1:7302", join: true,
					advertiseAddr: "10.0.0.1:7070", advertiseOpsAddr: "10.0.0.1:7071", heartbeatTimeout: time.Second,
					electionTimeout: 2 * time.Second, leaderLeaseTimeout: 100 * time.Millisecond, handoverDrain: 3 * time.Second}
			}},
		{"non-loopback ops-addr with a token", []string{"-ops-addr=0.0.0.0:7071"}, map[string]string{"BATON_ADMIN_TOKEN_FILE": "/t"},
			func(o *serveOptions) { o.opsAddr, o.adminTokenFile = "0.0.0.0:7071", "/t" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr batontest.SyncBuffer
			s := &sys{stdout: &stdout, stderr: &stderr, lookupEnv: fakeEnv(tt.env)}
			got, code, ok := parseServe(s, serveCommand(), tt.args)
			if !ok {
				t.Fatalf("parseServe: exit code %d, stderr %q; want success", code, stderr.String())
			}
			want := defaults
			tt.want(&want)
			if want.cl == (clusterOptions{}) { // the cases that set *o whole leave the cluster defaults
				want.cl = defaults.cl
			}
			if want.sec == (securityOptions{}) { // and the security defaults
				want.sec = defaults.sec
			}
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestOpsConnLimit: ops connections may hold a quarter of the process's
// descriptors at most, whatever -ops-max-conns asks.
func TestConnCapLimit(t *testing.T) {
	for _, tt := range []struct{ want, fileLimit, got int }{
		{1024, 2048, 512}, {1024, 1 << 20, 1024}, {0, 2048, 0}, {4096, 0, 4096},
	} {
		if got := connCapLimit(tt.want, tt.fileLimit); got != tt.got {
			t.Errorf("connCapLimit(%d, %d) = %d, want %d", tt.want, tt.fileLimit, got, tt.got)
		}
	}
}

func TestOpsConnLimit(t *testing.T) {
	for _, tt := range []struct{ want, fileLimit, got int }{
		{256, 1024, 256}, {256, 0, 256}, {1000, 1024, 256}, {5000, 1 << 20, 5000}, {10, 2, 1},
	} {
		if got := opsConnLimit(tt.want, tt.fileLimit); got != tt.got {
			t.Errorf("opsConnLimit(%d, %d) = %d, want %d", tt.want, tt.fileLimit, got, tt.got)
		}
	}
}

// TestMaxLeaseDefaults: -max-lease has no default cap on a standalone
// server and a one-minute one in a cluster; an explicit value (0: none)
// wins in both, from the flag or BATON_MAX_LEASE.
func TestMaxLeaseDefaults(t *testing.T) {
	cluster := []string{"-node-id=n1", "-raft-addr=127.0.0.1:7301", "-peers=n1=127.0.0.1:7301"}
	for _, tc := range []struct {
		args []string
		env  string
		want time.Duration
	}{
		{nil, "", 0},
		{cluster, "", time.Minute},
		{append([]string{"-max-lease=0"}, cluster...), "", 0},
		{append([]string{"-max-lease=10s"}, cluster...), "", 10 * time.Second},
		{nil, "90s", 90 * time.Second},
		{cluster, "5m", 5 * time.Minute},
	} {
		var o serveOptions
		fs := newServeFlags(&o)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		if tc.env != "" {
			env["BATON_MAX_LEASE"] = tc.env
		}
		if err := applyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
			t.Fatal(err)
		}
		if got := o.serverConfig().MaxLease; got != tc.want {
			t.Errorf("args %v, BATON_MAX_LEASE=%q: max lease %v, want %v", tc.args, tc.env, got, tc.want)
		}
	}
}
