package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/tokenstore"
	"github.com/batonlock/baton/ops"
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
	if o.adminTokenFile == "" && !isLoopback(o.opsAddr) {
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

// isLoopback reports whether the listener address addr (host:port) can only
// be reached from this machine: its host is localhost or a loopback IP. An
// empty host, 0.0.0.0 and :: listen everywhere; other names are not
// resolved, so they count as reachable from outside.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// readAdminToken reads the bearer token from file, without the whitespace
// around it.
func readAdminToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("admin-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin-token-file %s is empty", file)
	}
	return tok, nil
}

// minAdminTokenLen is the fewest characters the server's admin token may
// have: 32 random characters (openssl rand -hex 16 and longer) cannot be
// guessed through the ops API, a short word can.
const minAdminTokenLen = 32

// minTokenDistinct is the fewest different characters an admin token has
// without a warning: 32 random hex digits have about 14, one repeated
// character or a word typed over and over has a handful.
const minTokenDistinct = 8

// distinctRunes counts the different characters of s.
func distinctRunes(s string) int {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
	}
	return len(seen)
}

// othersMayReplace reports whether users other than dir's owner may
// replace the files in it: it is writable by group or others, and not
// sticky (as /tmp is, where only a file's owner may replace it).
func othersMayReplace(dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return false
	}
	return fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0
}

// readServerToken reads the server's admin token from file (see
// readAdminToken) and refuses one shorter than minAdminTokenLen.
// perm is the file's permission bits, for the warning (once the logger
// exists) when users other than its owner may read or write it.
func readServerToken(file string) (tok string, perm os.FileMode, err error) {
	if tok, err = readAdminToken(file); err != nil {
		return "", 0, err
	}
	if n := utf8.RuneCountInString(tok); n < minAdminTokenLen {
		return "", 0, fmt.Errorf("admin-token-file %s holds a token of %d characters; it must have at least %d (make one with: openssl rand -hex 32)", file, n, minAdminTokenLen)
	}
	if fi, err := os.Stat(file); err == nil {
		perm = fi.Mode().Perm()
	}
	return tok, perm, nil
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

func runServe(ctx context.Context, s *sys, c *command, args []string) int {
	o, code, ok := parseServe(s, c, args)
	if !ok {
		return code
	}
	r, code := start(ctx, s, &o)
	if r == nil {
		return code
	}
	return r.run(ctx)
}

// parseServe reads and checks the flags and variables of baton serve. When
// ok is false the command must return code.
func parseServe(s *sys, c *command, args []string) (o serveOptions, code int, ok bool) {
	fs := newServeFlags(&o)
	if code, ok := parseFlags(s, c, fs, args); !ok {
		return o, code, false
	}
	if fs.NArg() > 0 {
		return o, usageError(s, c.name, fmt.Sprintf("unexpected argument %q", fs.Arg(0))), false
	}
	if err := o.check(); err != nil {
		return o, usageError(s, c.name, err.Error()), false
	}
	return o, exitOK, true
}

// running is a started server: the protocol server and the ops HTTP server,
// each serving in its own goroutine.
type running struct {
	o        *serveOptions
	logger   *slog.Logger
	store    *tokenstore.Store // nil in replicated mode
	node     *cluster.Node     // nil in standalone mode
	srv      *server.Server
	sec      *security
	hup      chan os.Signal // SIGHUP: reload the certificates and the access rules
	hs       *http.Server
	serveErr chan error // Serve's result
	opsErr   chan error // the ops server's result
}

// start opens the token store, builds the server, binds both listeners and
// starts serving. On failure it returns nil and the exit code, after one
// line on stderr, with nothing left running or bound.
func start(ctx context.Context, s *sys, o *serveOptions) (*running, int) {
	const name = "serve"
	// Start-up failures are plain lines like the usage errors, whatever the
	// log format: nothing has started, and a person is likely reading.
	var (
		token     string
		tokenPerm os.FileMode
	)
	if o.adminTokenFile != "" {
		var err error
		if token, tokenPerm, err = readServerToken(o.adminTokenFile); err != nil {
			return nil, failure(s, name, err.Error())
		}
	}
	sec, err := loadSecurity(&o.sec)
	if err != nil {
		return nil, failure(s, name, err.Error())
	}
	logger := newLogger(s, o.logFormat, o.logLevel)
	if tokenPerm&0o077 != 0 {
		logger.Warn("admin-token-file can be read or written by users other than its owner, and whoever reads it can release any lock: chmod 600 it",
			"file", o.adminTokenFile, "mode", fmt.Sprintf("%#o", tokenPerm))
	}
	if token != "" {
		if n := distinctRunes(token); n < minTokenDistinct {
			logger.Warn("the admin token has few different characters, so it can be guessed: make one with openssl rand -hex 32",
				"file", o.adminTokenFile, "distinct_characters", n)
		}
		if dir := filepath.Dir(o.adminTokenFile); othersMayReplace(dir) {
			logger.Warn("the directory of admin-token-file can be written by users other than its owner, who can replace the token: keep it in a directory only its owner writes",
				"dir", dir)
		}
	}
	// Both listeners are bound before the data directory is touched: a port
	// in use must leave nothing behind, and opening the token store spends
	// an epoch (and may start a crash grace) that a failed start would waste;
	// in a cluster, Raft would start taking part in elections.
	ln, err := server.Listen(context.Background(), o.serverConfig(), o.addr)
	if err != nil {
		return nil, failure(s, name, fmt.Sprintf("addr: %v", err))
	}
	opsLn, err := net.Listen("tcp", o.opsAddr)
	if err != nil {
		ln.Close()
		return nil, failure(s, name, fmt.Sprintf("ops-addr: %v", err))
	}
	unbind := func() { ln.Close(); opsLn.Close() }
	cfg := o.serverConfig()
	cfg.Logger = logger
	if sec.protoTLS != nil {
		cfg.TLS = sec.protoTLS.Config()
	}
	// One set of CPU slots for the handshakes of unknown clients on every
	// TLS listener, fewer than the Ps: heartbeats and Raft keep one.
	cfg.HandshakeCPU = server.NewHandshakeCPU(0)
	cfg.ACL = sec.acl
	var (
		store *tokenstore.Store
		node  *cluster.Node
		grace time.Duration
	)
	if o.cl.enabled() {
		// Replicated mode: the tokens' epoch and the lease bound live in
		// the Raft log under data-dir, not in the token store.
		if node, err = openNode(ctx, o, logger, cfg.HandshakeCPU); err != nil {
			unbind()
			return nil, failure(s, name, err.Error())
		}
		node.Hooks(&cfg)
	} else {
		if store, err = tokenstore.Open(o.dataDir); err != nil {
			unbind()
			return nil, failure(s, name, fmt.Sprintf("data-dir %s: %v", o.dataDir, err))
		}
		cfg.NextToken = store.Next
		cfg.Leases = store
		// Protocol version 3: the key and generation, tickets, the claims
		// a clean stop listed, the crash grace (counted from the server's
		// start, not from the crash: later is only safer), capped by
		// -crash-grace-max, which also caps the leases given credentials.
		cfg.Logger = logger
		if _, err := server.ConfigureStandalone(&cfg, store, o.crashGraceMax); err != nil {
			unbind()
			return nil, failure(s, name, fmt.Sprintf("data-dir %s: %v", o.dataDir, err))
		}
		grace = cfg.NoGrantFor
		if perm := store.KeyPerm(); perm&0o077 != 0 {
			logger.Warn("resume-key in the data directory can be read by users other than its owner, and whoever reads it can take over any claim: chmod 600 it",
				"file", filepath.Join(o.dataDir, "resume-key"), "mode", fmt.Sprintf("%#o", perm))
		}
	}
	closeNode := func() {
		if node != nil {
			node.Close()
		}
	}
	srv, err := server.New(cfg)
	if err != nil {
		unbind()
		closeNode()
		return nil, failure(s, name, err.Error())
	}
	// What the dashboard shows of the server itself (the process collector
	// gives its start time).
	srv.Registry().MustRegister(serverInfo(ln.Addr().String(), o.cl.advertiseAddr))
	opsCfg := ops.Config{}
	if node != nil {
		node.RegisterMetrics(srv.Registry())
		node.Start(srv)
		opsCfg.Cluster, opsCfg.NodeID = node, o.cl.nodeID
		opsCfg.ProxyTransport, opsCfg.ProxyTLS = sec.proxyTransport(node)
	}

	// Caught from here on: SIGHUP's default action would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var opsACL func() *server.ACL
	if o.sec.opsTLSClientCA != "" && o.sec.acl() {
		opsACL = srv.ACL
	}
	r := &running{
		o:      o,
		logger: logger,
		store:  store,
		node:   node,
		srv:    srv,
		sec:    sec,
		hup:    hup,
		hs: &http.Server{
			Handler: ops.NewHandler(ops.Config{
				Backend:           srv,
				Gatherer:          srv.Registry(),
				AdminToken:        token,
				Logger:            logger,
				RequireClientCert: o.sec.opsTLSClientCA != "",
				ACL:               opsACL,
				Cluster:           opsCfg.Cluster,
				NodeID:            opsCfg.NodeID,
				ProxyTransport:    opsCfg.ProxyTransport,
				ProxyTLS:          opsCfg.ProxyTLS,
				Registerer:        srv.Registry(),
				MetricsMaxAge:     ops.DefaultMetricsMaxAge,
				SourcePrefixes:    cfg.SourcePrefixes,
			}),
			ReadHeaderTimeout: opsReadHeaderTimeout,
			ReadTimeout:       opsReadTimeout,
			WriteTimeout:      opsWriteTimeout,
			IdleTimeout:       opsIdleTimeout,
			MaxHeaderBytes:    opsMaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
			ConnContext:       ops.ConnContext,
			ConnState:         ops.ConnState,
		},
		serveErr: make(chan error, 1),
		opsErr:   make(chan error, 1),
	}
	for _, c := range []struct {
		flag       string
		asked, got int
	}{{"max-conns-per-ip", o.sec.maxConnsPerIP, cfg.MaxConnsPerIP}, {"max-conns-per-identity", o.sec.maxConnsPerIdentity, cfg.MaxConnsPerIdentity}} {
		if c.got < c.asked {
			logger.Warn(c.flag+" lowered to a quarter of the open-file limit, so that one client cannot hold every descriptor",
				strings.ReplaceAll(c.flag, "-", "_"), c.got, "asked", c.asked, "open_file_limit", server.FileLimit())
		}
	}
	opsConns := opsConnLimit(o.opsMaxConns, server.FileLimit())
	if opsConns < o.opsMaxConns {
		logger.Warn("ops-max-conns lowered to a quarter of the open-file limit, so that idle ops connections cannot take the lock sessions' descriptors",
			"ops_max_conns", opsConns, "asked", o.opsMaxConns, "open_file_limit", server.FileLimit())
	}
	// Past the cap, the longest idle connection gives way to a new one;
	// when none is idle, new ones wait in the kernel's backlog, holding no
	// descriptor of the process, until an open one closes.
	// A lock client that dialled the ops port is told where the lock
	// protocol is, at once, instead of waiting for an HTTP request line.
	opsIn := refuseLockClients(opsLn, lockAddrText(o.cl.advertiseAddr, ln.Addr()))
	opsLimits := ops.ListenerLimits{Conns: opsConns, ConnsPerIP: o.opsMaxConnsIP, Registerer: srv.Registry(), Logger: logger, Prefixes: cfg.SourcePrefixes, RequestRate: ops.DefaultRequestRate}
	opsGate := server.NewHandshakeGate(server.HandshakeLimits{
		Listener:     "ops",
		HelloTimeout: server.DefaultHelloTimeout,
		Timeout:      opsReadHeaderTimeout, // http.Server's bound of the handshake
		SourceRate:   opsHandshakeRate,
		SourceBurst:  2 * opsHandshakeRate,
		CPU:          cfg.HandshakeCPU,
		KnownFor:     time.Hour,
		Prefixes:     cfg.SourcePrefixes,
		Registerer:   srv.Registry(),
	})
	go func() { r.opsErr <- r.hs.Serve(sec.opsListener(ops.LimitListener(opsIn, opsLimits), opsGate)) }()
	go func() { r.serveErr <- srv.Serve(ln) }()

	dataDir := o.dataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	attrs := []any{
		"addr", ln.Addr().String(),
		"ops_addr", opsLn.Addr().String(),
		"data_dir", dataDir}
	if node != nil {
		attrs = append(attrs, "node_id", o.cl.nodeID, "raft_addr", o.cl.raftAddr)
		if o.cl.raftAdvertise != "" {
			attrs = append(attrs, "raft_advertise", o.cl.raftAdvertise)
		}
	} else {
		attrs = append(attrs, "epoch", store.Epoch(), "crash_grace", grace.String())
	}
	attrs = append(attrs, "admin_token", token != "", "max_conns_per_ip", cfg.MaxConnsPerIP, "max_conns", srv.MaxConns())
	if cfg.TLS != nil && o.sec.tlsClientCA != "" {
		attrs = append(attrs, "max_conns_per_identity", cfg.MaxConnsPerIdentity)
	}
	logger.Info("baton serving", append(attrs, sec.logAttrs()...)...)
	return r, exitOK
}

// writeResumeList writes the list of claims of version 3 the stop handed
// on (server.Server.HandoverList) into the data directory.
func (r *running) writeResumeList() error {
	l := r.srv.HandoverList()
	if l == nil {
		return nil
	}
	if err := r.store.WriteResumeList(server.EncodeHandover(l, 0)[0]); err != nil {
		return err
	}
	held := 0
	for _, c := range l.Claims {
		if c.Token != 0 {
			held++
		}
	}
	r.logger.Info("claims handed to the next start", "claims", len(l.Claims), "holders", held, "longest_left", l.LongestLeft().String())
	return nil
}

// run serves until ctx is done or a server fails, then shuts down: the
// protocol server first, then, after the linger, the ops server. It
// returns the exit code.
func (r *running) run(ctx context.Context) int {
	defer signal.Stop(r.hup)
	code := exitOK
	serveDone := false
	var nodeFailed <-chan error
	if r.node != nil {
		nodeFailed = r.node.Failed()
	}
wait:
	for {
		select {
		case err := <-nodeFailed:
			r.logger.Error("cluster node stopped", "err", err)
			code = exitFailure
		case <-r.hup:
			r.sec.reload(r.logger, r.srv)
			continue
		case <-ctx.Done():
			r.logger.Info("shutting down", "reason", context.Cause(ctx).Error(), "linger", r.o.shutdownLinger.String())
		case err := <-r.serveErr:
			serveDone = true
			r.logger.Error("protocol server stopped", "err", err)
			code = exitFailure
		case err := <-r.opsErr:
			r.opsErr <- err // for the close below
			r.logger.Error("ops server stopped", "err", err)
			code = exitFailure
		}
		break wait
	}

	if r.node != nil {
		// A leader hands over (SHUTDOWN to every session, a short drain,
		// the handoff bound, the transfer); a follower has nothing to do.
		if err := r.node.Handover(); err != nil {
			r.logger.Warn("planned handover incomplete; the next leader waits the full grace", "err", err)
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), r.o.ioTimeout+shutdownSlack)
	err := r.srv.Shutdown(shutdownCtx)
	cancel()
	if r.node != nil {
		if err := r.node.Close(); err != nil {
			r.logger.Warn("raft shutdown", "err", err)
		}
	}
	listed := true
	if r.store != nil {
		// The claims the stop handed to the next start, before the clean
		// mark: a list not written is a stop as after a crash.
		if lerr := r.writeResumeList(); lerr != nil {
			r.logger.Error("cannot write the list of claims for the next start; it will wait as after a crash", "err", lerr)
			listed = false
			code = exitFailure
		}
	}
	if err != nil {
		r.logger.Error("shutdown of the protocol server did not complete", "err", err)
		code = exitFailure
	} else if r.store == nil || !listed {
		// Replicated mode: nothing to mark; the log is the record.
	} else if err := r.store.MarkClean(); err != nil {
		// Every session was told; the next start only waits needlessly.
		r.logger.Warn("cannot record the controlled shutdown; the next start will wait as after a crash", "err", err)
	}
	if !serveDone {
		if err := <-r.serveErr; !errors.Is(err, server.ErrServerClosed) {
			r.logger.Error("protocol server stopped", "err", err)
			code = exitFailure
		}
	}

	// Probes and scrapers see the shutdown through to its end: /readyz says
	// 503 and /healthz 200 while the ops listener lingers. A failed server
	// exits without it.
	if code == exitOK && r.o.shutdownLinger > 0 {
		r.logger.Info("protocol listener closed; ops endpoints linger", "linger", r.o.shutdownLinger.String())
		t := time.NewTimer(r.o.shutdownLinger)
		select {
		case <-t.C:
		case err := <-r.opsErr:
			t.Stop()
			r.opsErr <- err
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), opsCloseTimeout)
	err = r.hs.Shutdown(closeCtx)
	cancel()
	if err != nil {
		r.hs.Close()
	}
	if err := <-r.opsErr; !errors.Is(err, http.ErrServerClosed) {
		if code == exitOK {
			r.logger.Error("ops server stopped", "err", err)
		}
		code = exitFailure
	}
	r.logger.Info("baton stopped", "exit_code", code)
	return code
}
