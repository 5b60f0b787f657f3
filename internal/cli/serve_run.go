package cli

// baton serve once its flags are checked: the listeners, the server, the
// ops API and, in a cluster, the node, started and run until the end.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/sniff"
	"github.com/batonlock/baton/internal/tokenfile"
	"github.com/batonlock/baton/internal/tokenstore"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

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
		if token, tokenPerm, err = tokenfile.ReadServer(o.adminTokenFile); err != nil {
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
		if n := tokenfile.Distinct(token); n < tokenfile.MinDistinct {
			logger.Warn("the admin token has few different characters, so it can be guessed: make one with openssl rand -hex 32",
				"file", o.adminTokenFile, "distinct_characters", n)
		}
		if dir := filepath.Dir(o.adminTokenFile); tokenfile.OthersMayReplace(dir) {
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
	opsIn := sniff.RefuseLockClients(opsLn, sniff.LockAddrText(o.cl.advertiseAddr, ln.Addr()))
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
