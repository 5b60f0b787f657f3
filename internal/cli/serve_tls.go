package cli

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// opsTLSOff is the -ops-tls-cert value that keeps the ops listener on plain
// HTTP while the protocol listener speaks TLS.
const opsTLSOff = "none"

// securityOptions are the flags of baton serve for TLS, access rules and
// connection caps (docs/security.md).
type securityOptions struct {
	tlsCert, tlsKey, tlsClientCA          string
	opsTLSCert, opsTLSKey, opsTLSClientCA string
	aclFile                               string
	maxConnsPerIP, maxConnsPerIdentity    int
	maxPendingHandshakes                  int
	handshakeRate                         float64
	ipv4Prefix, ipv6Prefix                int
}

func (o *securityOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM `file` of the protocol listener's certificate chain: it speaks TLS (needs -tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM `file` of the private key of -tls-cert")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM `file` of the CAs that sign client certificates: mutual TLS, a client without one is refused in the handshake")
	fs.StringVar(&o.opsTLSCert, "ops-tls-cert", "", "PEM `file` of the ops listener's certificate; default the -tls-cert, \"none\" for plain HTTP")
	fs.StringVar(&o.opsTLSKey, "ops-tls-key", "", "PEM `file` of the private key of -ops-tls-cert; default the -tls-key")
	fs.StringVar(&o.opsTLSClientCA, "ops-tls-client-ca", "", "PEM `file` of the CAs whose client certificates /v1/ requires (probes and /metrics need none)")
	fs.StringVar(&o.aclFile, "acl-file", "", "JSON `file` of access rules: which client identities may acquire which locks (needs -tls-client-ca)")
	def := server.DefaultConfig()
	fs.IntVar(&o.maxConnsPerIP, "max-conns-per-ip", def.MaxConnsPerIP, "most open protocol connections from one IP address; more are closed at once (0: no cap; lowered to a quarter of the open-file limit)")
	fs.IntVar(&o.maxConnsPerIdentity, "max-conns-per-identity", def.MaxConnsPerIdentity, "most open protocol connections of one client identity under mutual TLS, from whatever addresses; more get ERROR OVERLOADED (0: no cap; lowered to a quarter of the open-file limit)")
	fs.IntVar(&o.maxPendingHandshakes, "max-pending-handshakes", def.PendingHandshakes, "most TLS handshakes in progress on the protocol listener (about 32 KiB each); past it one of the address with the most is cut for a new one, one that has not sent its ClientHello first (0: no cap)")
	fs.Float64Var(&o.handshakeRate, "handshake-rate-per-ip", def.HandshakeRate, "TLS handshakes a second that one address of clients not known by a verified certificate may begin on the protocol listener, twice as many at once; more wait for their turn (0: no limit)")
	fs.IntVar(&o.ipv4Prefix, "ipv4-prefix", def.SourcePrefixes.V4, "leading `bits` of an IPv4 address that make one address for the per-address caps and rates")
	fs.IntVar(&o.ipv6Prefix, "ipv6-prefix", def.SourcePrefixes.V6, "leading `bits` of an IPv6 address that make one address for the per-address caps and rates (an IPv6 host has a /64; 128 counts each address apart)")
}

// prefixes say which addresses are one for the per-address caps and rates.
func (o *securityOptions) prefixes() server.SourcePrefixes {
	return server.SourcePrefixes{V4: o.ipv4Prefix, V6: o.ipv6Prefix}
}

// opsFiles are the certificate and key the ops listener serves, "" for
// plain HTTP.
func (o *securityOptions) opsFiles() (cert, key string) {
	switch o.opsTLSCert {
	case opsTLSOff:
		return "", ""
	case "":
		return o.tlsCert, o.tlsKey
	}
	return o.opsTLSCert, o.opsTLSKey
}

// check reports the first combination of the flags that cannot work.
func (o *securityOptions) check() error {
	switch {
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return errors.New("tls-cert and tls-key go together: give both or neither")
	case o.tlsClientCA != "" && o.tlsCert == "":
		return errors.New("tls-client-ca needs tls-cert and tls-key: mutual TLS is TLS first")
	case o.opsTLSCert == opsTLSOff && (o.opsTLSKey != "" || o.opsTLSClientCA != ""):
		return fmt.Errorf("ops-tls-cert %s turns TLS off on the ops listener: give no ops-tls-key or ops-tls-client-ca", opsTLSOff)
	case o.opsTLSCert != "" && o.opsTLSCert != opsTLSOff && o.opsTLSKey == "":
		return errors.New("ops-tls-cert needs ops-tls-key")
	case o.opsTLSKey != "" && o.opsTLSCert == "":
		return errors.New("ops-tls-key needs ops-tls-cert")
	case o.acl() && o.tlsClientCA == "":
		return errors.New("acl-file needs tls-client-ca: the rules match the identities of verified client certificates")
	}
	if cert, _ := o.opsFiles(); o.opsTLSClientCA != "" && cert == "" {
		return errors.New("ops-tls-client-ca needs TLS on the ops listener: give ops-tls-cert and ops-tls-key, or tls-cert and tls-key")
	}
	return nil
}

func (o *securityOptions) acl() bool { return o.aclFile != "" }

// security is what start loaded for the flags: the reloadable TLS
// configurations and the access rules.
type security struct {
	o        *securityOptions
	protoTLS *server.TLSReloader // nil: plain TCP
	opsTLS   *server.TLSReloader // nil: plain HTTP
	acl      *server.ACL
	// forward is the leader's side of the channel on which followers send
	// ops requests on (proxyTransport); nil outside a cluster over TLS.
	forward *tls.Config
}

// loadSecurity reads every file the flags name. Its errors name the flag.
func loadSecurity(o *securityOptions) (*security, error) {
	sec := &security{o: o}
	var err error
	if o.tlsCert != "" {
		if sec.protoTLS, err = newReloader("tls", o.tlsCert, o.tlsKey, o.tlsClientCA, false); err != nil {
			return nil, err
		}
	}
	if cert, key := o.opsFiles(); cert != "" {
		if sec.opsTLS, err = newReloader("ops-tls", cert, key, o.opsTLSClientCA, true); err != nil {
			return nil, err
		}
	}
	if o.acl() {
		if sec.acl, err = sec.loadACL(); err != nil {
			return nil, err
		}
	}
	return sec, nil
}

// newReloader loads one listener's files; prefix is the flags' ("tls",
// "ops-tls").
func newReloader(prefix, cert, key, clientCA string, optional bool) (*server.TLSReloader, error) {
	if clientCA != "" {
		// Checked alone first, so that its error names its own flag.
		if _, err := server.LoadCertPool(clientCA); err != nil {
			return nil, fmt.Errorf("%s-client-ca: %w", prefix, err)
		}
	}
	rl, err := server.NewTLSReloader(server.TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: clientCA, ClientCertOptional: optional})
	if err != nil {
		return nil, fmt.Errorf("%s-cert/%s-key: %w", prefix, prefix, err)
	}
	return rl, nil
}

// loadACL reads -acl-file and checks that its admin grants can be enforced.
func (sec *security) loadACL() (*server.ACL, error) {
	a, err := server.LoadACL(sec.o.aclFile)
	if err != nil {
		return nil, fmt.Errorf("acl-file: %w", err)
	}
	if a.HasAdmin() && sec.o.opsTLSClientCA == "" {
		return nil, fmt.Errorf("acl-file %s grants admin actions, but the ops listener verifies no client certificates: give ops-tls-client-ca", sec.o.aclFile)
	}
	return a, nil
}

// opsListener wraps the ops listener in TLS if it has it. In a cluster, a
// handshake that asks for the forward channel's protocol gets the
// channel's configuration (node certificates, members only); every other
// gets the listener's own.
func (sec *security) opsListener(ln net.Listener, gate *server.HandshakeGate) net.Listener {
	if sec.opsTLS == nil {
		return ln
	}
	cfg := sec.opsTLS.Config()
	if fwd := sec.forward; fwd != nil {
		own := cfg.GetConfigForClient
		cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if slices.Contains(hello.SupportedProtos, ops.ForwardProtocol) {
				return fwd, nil
			}
			return own(hello)
		}
	}
	return gate.Listener(ln, cfg)
}

// reload reads the certificates, client CA bundles and access rules again
// (SIGHUP). What fails to load is kept as it was and logged; the rest is
// replaced. New handshakes and new ACQUIREs see the new files; established
// sessions carry on.
func (sec *security) reload(log *slog.Logger, srv *server.Server) {
	o := sec.o
	var reloaded []string
	failed := false
	fail := func(what string, err error) {
		failed = true
		log.Error("reload failed; keeping the "+what+" in use", "err", err)
	}
	if sec.protoTLS != nil {
		if err := sec.protoTLS.Reload(); err != nil {
			fail("protocol TLS files", fmt.Errorf("tls-cert/tls-key/tls-client-ca: %w", err))
		} else {
			reloaded = append(reloaded, "tls")
		}
	}
	if sec.opsTLS != nil {
		if err := sec.opsTLS.Reload(); err != nil {
			fail("ops TLS files", fmt.Errorf("ops-tls-cert/ops-tls-key/ops-tls-client-ca: %w", err))
		} else {
			reloaded = append(reloaded, "ops-tls")
		}
	}
	if o.acl() {
		if a, err := sec.loadACL(); err != nil {
			fail("access rules", err)
		} else {
			sec.acl = a
			srv.SetACL(a)
			reloaded = append(reloaded, "acl-file")
		}
	}
	switch {
	case len(reloaded) > 0:
		log.Info("reloaded on SIGHUP", "files", reloaded, "failed", failed)
	case !failed:
		log.Info("SIGHUP: nothing to reload (no TLS or access rules configured)")
	}
}

// logAttrs describe the security settings for the start-up line.
func (sec *security) logAttrs() []any {
	mode := func(rl *server.TLSReloader, clientCA string) string {
		switch {
		case rl == nil:
			return "off"
		case clientCA != "":
			return "mutual"
		}
		return "on"
	}
	attrs := []any{"tls", mode(sec.protoTLS, sec.o.tlsClientCA), "ops_tls", mode(sec.opsTLS, sec.o.opsTLSClientCA)}
	if sec.acl != nil {
		attrs = append(attrs, "acl_rules", sec.acl.Rules())
	}
	return attrs
}
