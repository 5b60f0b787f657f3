package cli

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/internal/netaddr"
	"github.com/batonlock/baton/server"
)

// Bounds of the ops HTTP server. The ops endpoints are small requests from
// probes, scrapers and the admin tools; these keep a slow or stuck peer from
// holding a connection.
const (
	// The header and idle timeouts are short: an idle connection costs a
	// descriptor, and probes, scrapers and the admin tools send their
	// request at once.
	opsReadHeaderTimeout = 3 * time.Second
	opsReadTimeout       = 10 * time.Second
	opsWriteTimeout      = 30 * time.Second // /v1/locks of a large table
	opsIdleTimeout       = 5 * time.Second
	opsMaxHeaderBytes    = 64 << 10
	// defaultOpsConnsPerIP is -ops-max-conns-per-ip's default: an eighth
	// of -ops-max-conns's, far more than the probes, scrapers and tools of
	// one host hold without a credential (the connections of callers with
	// one do not count).
	defaultOpsConnsPerIP = 32
	// opsConnsShare is the largest share of the process's descriptors that
	// ops connections may hold (-ops-max-conns is lowered to it): the rest
	// are the lock sessions'.
	opsConnsShare = 4
	// opsHandshakeRate is how many TLS handshakes a second one address of
	// ops callers not known by a verified certificate begins (twice as
	// many at once): probes, scrapers and tools keep their connections or
	// open a few.
	opsHandshakeRate = 16
	// opsCloseTimeout bounds the graceful close of the ops server after the
	// linger; what is still open then is closed hard.
	opsCloseTimeout = 5 * time.Second
	// shutdownSlack is added to -io-timeout to bound the server's Shutdown:
	// every write to a session is bounded by io-timeout, so a Shutdown that
	// needs longer is stuck.
	shutdownSlack = 2 * time.Second
)

// serveOptions are the flags of baton serve.
type serveOptions struct {
	addr           string
	opsAddr        string
	ioTimeout      time.Duration
	dataDir        string
	adminTokenFile string
	shutdownLinger time.Duration
	maxSessions    int
	maxWaiters     int
	parkIdle       bool
	sendBuffer     int
	tcpFastOpen    bool
	metricsLocks   int
	opsMaxConns    int
	opsMaxConnsIP  int
	reserveFDs     int
	crashGraceMax  time.Duration
	maxLease       modeDuration
	logFormat      string
	logLevel       string
	sec            securityOptions
	cl             clusterOptions
}

func serveCommand() *command {
	return &command{
		name:    "serve",
		summary: "run the lock server in the foreground",
		usage:   "baton serve [flags]",
		flags:   func() *flag.FlagSet { return newServeFlags(new(serveOptions)) },
		help: `The server listens on -addr for the Baton protocol and on -ops-addr for the
ops HTTP endpoints (/healthz, /readyz, /metrics, /v1/...). It keeps what
makes fencing tokens rise across restarts in -data-dir.

SIGTERM or SIGINT starts a controlled shutdown: /readyz turns 503, every
session gets ERROR SHUTDOWN and is closed, the protocol listener closes, the
ops endpoints stay up for -shutdown-linger, then baton exits 0. A second
signal during the shutdown ends the process at once.

The server refuses to start when -ops-addr is not a loopback address
(localhost, 127.0.0.0/8, ::1) and no -admin-token-file is given: the /v1/
endpoints can release any lock.

After a restart that did not follow a controlled shutdown (kill -9, a
crash, a power loss), no lock is granted for the longest lease that any
session used before, capped by -crash-grace-max: a client of the dead
server may still believe it holds its lock for up to 0.8 x its lease.
Sessions queue meanwhile; NOWAIT ones get ERROR OVERLOADED.

With -tls-cert and -tls-key the protocol listener speaks TLS; with
-tls-client-ca too, only clients with a certificate signed by one of its
CAs get past the handshake (mutual TLS). The ops listener speaks TLS with
the same certificate unless -ops-tls-cert says otherwise (none: plain
HTTP); with -ops-tls-client-ca, /v1/ needs a verified client certificate.
-acl-file names JSON access rules: which certificate identities (subject
CN, DNS, URI or email SAN) may acquire which lock-name prefixes, and take
admin actions on which; a refused ACQUIRE gets ERROR UNAUTHORIZED. See
docs/security.md.

SIGHUP reloads the certificates, the client CA bundles and the access
rules: new connections and new ACQUIREs see them, established sessions
carry on. A file that fails to load is logged and the one in use kept.

Exit status: 0 after a controlled shutdown, 1 when the server cannot start
or fails (a listener cannot bind, the data directory, the token file, a
certificate, a CA bundle or the access rules file is unusable), 2 for a
usage error.

Examples:
  baton serve
  baton serve -addr :7070 -data-dir /var/lib/baton -log-format json
  baton serve -ops-addr 0.0.0.0:7071 -admin-token-file /etc/baton/admin-token
  baton serve -addr 0.0.0.0:7070 -tls-cert server.crt -tls-key server.key \
      -tls-client-ca clients-ca.crt -acl-file acl.json -admin-token-file token
  kill -HUP $(pidof baton)    # reload certificates and access rules
  BATON_IO_TIMEOUT=1s BATON_LOG_LEVEL=debug baton serve
`,
		run: runServe,
	}
}

func newServeFlags(o *serveOptions) *flag.FlagSet {
	def := server.DefaultConfig()
	fs := newFlagSet("serve")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:7070", "`host:port` of the protocol listener")
	fs.StringVar(&o.opsAddr, "ops-addr", "127.0.0.1:7071", "`host:port` of the ops HTTP listener")
	fs.DurationVar(&o.ioTimeout, "io-timeout", def.IOTimeout, "limit of one read or write on a session")
	fs.StringVar(&o.dataDir, "data-dir", "baton-data", "`directory` of the token store, relative to the working directory")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "`file` holding the bearer token that /v1/ needs")
	fs.DurationVar(&o.shutdownLinger, "shutdown-linger", 2*time.Second, "how long the ops endpoints stay up after the protocol listener closes")
	fs.IntVar(&o.maxSessions, "max-sessions", def.MaxSessions, "most sessions at once; more get ERROR OVERLOADED")
	fs.IntVar(&o.maxWaiters, "max-waiters", def.MaxWaitersPerLock, "most waiters of one lock; more get ERROR OVERLOADED")
	fs.BoolVar(&o.parkIdle, "park-idle", def.ParkIdle, "serve sessions from an epoll poller, without a goroutine each, where it can (Linux, plain TCP; less memory per session, no goroutine per claim)")
	fs.IntVar(&o.sendBuffer, "send-buffer", def.SendBuffer, "kernel send buffer of each session's socket, in `bytes` (0: the system's default)")
	fs.BoolVar(&o.tcpFastOpen, "tcp-fastopen", def.TCPFastOpen, "accept TCP Fast Open: a client's ACQUIRE may ride in its SYN (Linux; needs bit 2 of sysctl net.ipv4.tcp_fastopen)")
	fs.IntVar(&o.metricsLocks, "metrics-lock-names", def.MetricsLockNames, "how many lock `names` get series of their own in /metrics (0: none; later names share lock=\"_other\"; /metrics is open)")
	fs.IntVar(&o.opsMaxConns, "ops-max-conns", 256, "most open connections of the ops listener; more wait to be accepted, or take the place of the longest idle one (lowered to a quarter of the open-file limit)")
	fs.IntVar(&o.opsMaxConnsIP, "ops-max-conns-per-ip", defaultOpsConnsPerIP, "most ops connections from one IP address that have made no authenticated request; past it the address's longest idle one gives way, or the new one is closed (0: no cap)")
	fs.IntVar(&o.reserveFDs, "reserve-fds", def.ReserveFDs, "file descriptors the protocol listener keeps in reserve, so that sessions are admitted when something else holds every other one")
	fs.DurationVar(&o.crashGraceMax, "crash-grace-max", time.Minute, "longest wait without grants after a crash (0: none; shorter is available sooner but less safe)")
	fs.Var(&o.maxLease, "max-lease", "longest lease a session may ask for; longer ones get ERROR BAD_REQUEST (0: no limit; default none standalone, "+
		clusterMaxLease.String()+" in a cluster, where the lease bound is every crash failover's wait)")
	fs.Var(newChoiceValue(&o.logFormat, "text", "text", "json"), "log-format", "log `format`: text or json")
	fs.Var(newChoiceValue(&o.logLevel, "info", "debug", "info", "warn", "error"), "log-level", "least `level` logged: debug, info, warn or error")
	o.sec.register(fs)
	o.cl.register(fs)
	return fs
}

// check reports the first option that cannot work, in the words of the
// flags. It does not touch the disk or the network.
func (o *serveOptions) check() error {
	if err := checkAddr("addr", o.addr); err != nil {
		return err
	}
	if err := checkAddr("ops-addr", o.opsAddr); err != nil {
		return err
	}
	if o.dataDir == "" {
		return errors.New("data-dir must not be empty")
	}
	if o.crashGraceMax < 0 {
		return fmt.Errorf("crash-grace-max (%v) must not be negative", o.crashGraceMax)
	}
	if o.opsMaxConns <= 0 {
		return fmt.Errorf("ops-max-conns (%d) must be positive", o.opsMaxConns)
	}
	if o.opsMaxConnsIP < 0 {
		return fmt.Errorf("ops-max-conns-per-ip (%d) must not be negative", o.opsMaxConnsIP)
	}
	if o.shutdownLinger < 0 {
		return fmt.Errorf("shutdown-linger (%v) must not be negative", o.shutdownLinger)
	}
	if o.sec.ipv4Prefix < 1 || o.sec.ipv6Prefix < 1 {
		return fmt.Errorf("ipv4-prefix (%d) and ipv6-prefix (%d) must be at least 1", o.sec.ipv4Prefix, o.sec.ipv6Prefix)
	}
	if err := o.sec.check(); err != nil {
		return err
	}
	if o.cl.enabled() {
		if _, err := o.cl.config(o.addr, o.opsAddr, o.dataDir, &o.sec); err != nil {
			return err
		}
	}
	// The server's own rules, with a stand-in for the token source that is
	// only opened later, so that they are checked before anything starts.
	probe := o.serverConfig()
	probe.NextToken = func() uint64 { return 1 }
	if err := probe.Validate(); err != nil {
		return err
	}
	if o.adminTokenFile == "" && !netaddr.IsLoopback(o.opsAddr) {
		return fmt.Errorf("ops-addr %s is not a loopback address and no admin-token-file is given: "+
			"anyone who reaches it could release any lock", o.opsAddr)
	}
	return nil
}

// serverConfig is the server's configuration from the options, without
// NextToken and Logger.
func (o *serveOptions) serverConfig() server.Config {
	cfg := server.DefaultConfig()
	cfg.IOTimeout = o.ioTimeout
	cfg.MaxSessions = o.maxSessions
	cfg.MaxWaitersPerLock = o.maxWaiters
	cfg.ParkIdle = o.parkIdle
	cfg.SendBuffer = o.sendBuffer
	cfg.TCPFastOpen = o.tcpFastOpen
	cfg.MaxConnsPerIP = connCapLimit(o.sec.maxConnsPerIP, server.FileLimit())
	cfg.MaxConnsPerIdentity = connCapLimit(o.sec.maxConnsPerIdentity, server.FileLimit())
	cfg.PendingHandshakes = o.sec.maxPendingHandshakes
	cfg.HandshakeRate = o.sec.handshakeRate
	cfg.SourcePrefixes = o.sec.prefixes()
	cfg.KeepFDs = keepFDs(opsConnLimit(o.opsMaxConns, server.FileLimit()), o.cl.enabled(), server.FileLimit())
	cfg.MetricsLockNames = o.metricsLocks
	cfg.ReserveFDs = o.reserveFDs
	cfg.MaxLease = o.maxLease.value(0)
	if o.cl.enabled() {
		cfg.MaxLease = o.maxLease.value(clusterMaxLease)
	}
	return cfg
}

// serverInfo is the gauge baton_server_info, always 1, whose labels say
// what the server is: its build and the address of its lock protocol (the
// advertised one if set, else the bound one).
func serverInfo(bound, advertised string) prometheus.Gauge {
	addr := bound
	if advertised != "" {
		addr = advertised
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_server_info",
		Help: "Always 1: the build (version, commit, goversion) and the lock protocol's address (addr) of this server.",
		ConstLabels: prometheus.Labels{
			"version": version(), "commit": commit(), "goversion": runtime.Version(), "addr": addr,
		},
	})
	g.Set(1)
	return g
}

// clusterMaxLease is -max-lease's default in a cluster: a crash failover
// waits up to the longest lease any session holds or waits with (plus
// twice the leader lease), so an unbounded lease would let any client
// freeze failover for as long as it likes.
const clusterMaxLease = time.Minute

// connCapLimit is a cap of protocol connections (per address, per
// client identity): want, but no more than a quarter of the open-file
// limit (0: unknown), so that one address or one client never holds every
// descriptor. 0 (no cap) stays 0, and a negative value for Validate.
func connCapLimit(want, fileLimit int) int {
	if want <= 0 {
		return want
	}
	return opsConnLimit(want, fileLimit)
}

// Descriptors the protocol listener's connections never take (see
// keepFDs): Raft's in a cluster (what strangers may hold on its port, 128,
// and the members' connections), and the server's files (the data
// directory, the Raft log, the listeners).
const (
	raftKeepFDs  = 192
	filesKeepFDs = 32
)

// keepFDs is server.Config.KeepFDs: the descriptors of the ops
// listener (opsConns), of Raft in a cluster, and of files, so that lock
// sessions from many addresses never leave Raft unable to dial or accept,
// nor the ops listener unable to answer; at most half the open-file
// limit, the other half being the sessions' (0: unknown, none kept).
func keepFDs(opsConns int, clustered bool, fileLimit int) int {
	if fileLimit <= 0 {
		return 0
	}
	n := opsConns + filesKeepFDs
	if clustered {
		n += raftKeepFDs
	}
	return min(n, fileLimit/2)
}

// opsConnLimit is the cap of open ops connections: want, but no more than
// a quarter of the open-file limit (0: unknown).
func opsConnLimit(want, fileLimit int) int {
	if fileLimit > 0 {
		return max(1, min(want, fileLimit/opsConnsShare))
	}
	return want
}

func checkAddr(flagName, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q is not host:port: %v", flagName, addr, err)
	}
	return nil
}

func newLogger(s *sys, format, level string) *slog.Logger {
	var lv slog.Level
	// The choice flag has already refused anything else.
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(s.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(s.stderr, opts))
}
