// Package servesec is baton serve's listener security as loaded from the
// files its flags name: the protocol and ops listeners' reloadable TLS,
// the access rules, their reload on SIGHUP, the ops listener's TLS (with
// a cluster's forward channel beside it), and the start-up line's
// description of them. Its errors name baton serve's flags.
package servesec

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"github.com/batonlock/baton/server"
)

// Files are the files of baton serve's security flags; "" is a flag not
// given. The ops listener's are the ones it serves (its flags, or the
// protocol listener's by default): no OpsCert is plain HTTP.
type Files struct {
	Cert, Key, ClientCA    string // -tls-cert, -tls-key, -tls-client-ca
	OpsCert, OpsKey, OpsCA string // -ops-tls-*
	ACL                    string // -acl-file
}

// State is what Load read: the reloadable TLS configurations and the
// access rules.
type State struct {
	files    Files
	protoTLS *server.TLSReloader // nil: plain TCP
	opsTLS   *server.TLSReloader // nil: plain HTTP
	acl      *server.ACL
	// forward is the configuration of the ops listener's handshakes that
	// ask for forwardProto (SetForward); nil outside a cluster over TLS.
	forward      *tls.Config
	forwardProto string
}

// Load reads every file f names.
func Load(f Files) (*State, error) {
	st := &State{files: f}
	var err error
	if f.Cert != "" {
		if st.protoTLS, err = newReloader("tls", f.Cert, f.Key, f.ClientCA, false); err != nil {
			return nil, err
		}
	}
	if f.OpsCert != "" {
		if st.opsTLS, err = newReloader("ops-tls", f.OpsCert, f.OpsKey, f.OpsCA, true); err != nil {
			return nil, err
		}
	}
	if f.ACL != "" {
		if st.acl, err = st.loadACL(); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// ProtoTLS is the protocol listener's TLS, nil for plain TCP.
func (st *State) ProtoTLS() *server.TLSReloader { return st.protoTLS }

// ACL is the access rules in force, nil if none.
func (st *State) ACL() *server.ACL { return st.acl }

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
func (st *State) loadACL() (*server.ACL, error) {
	a, err := server.LoadACL(st.files.ACL)
	if err != nil {
		return nil, fmt.Errorf("acl-file: %w", err)
	}
	if a.HasAdmin() && st.files.OpsCA == "" {
		return nil, fmt.Errorf("acl-file %s grants admin actions, but the ops listener verifies no client certificates: give ops-tls-client-ca", st.files.ACL)
	}
	return a, nil
}

// SetForward makes the ops listener give cfg to a handshake that asks
// for protocol proto: a cluster's forward channel, on which followers
// send ops requests on to the leader. Called before OpsListener.
func (st *State) SetForward(proto string, cfg *tls.Config) {
	st.forwardProto, st.forward = proto, cfg
}

// OpsListener wraps the ops listener in TLS if it has it. In a cluster, a
// handshake that asks for the forward channel's protocol gets the
// channel's configuration (node certificates, members only); every other
// gets the listener's own.
func (st *State) OpsListener(ln net.Listener, gate *server.HandshakeGate) net.Listener {
	if st.opsTLS == nil {
		return ln
	}
	cfg := st.opsTLS.Config()
	if fwd, proto := st.forward, st.forwardProto; fwd != nil {
		own := cfg.GetConfigForClient
		cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if slices.Contains(hello.SupportedProtos, proto) {
				return fwd, nil
			}
			return own(hello)
		}
	}
	return gate.Listener(ln, cfg)
}

// Reload reads the certificates, client CA bundles and access rules again
// (SIGHUP). What fails to load is kept as it was and logged; the rest is
// replaced. New handshakes and new ACQUIREs see the new files; established
// sessions carry on.
func (st *State) Reload(log *slog.Logger, srv *server.Server) {
	var reloaded []string
	failed := false
	fail := func(what string, err error) {
		failed = true
		log.Error("reload failed; keeping the "+what+" in use", "err", err)
	}
	if st.protoTLS != nil {
		if err := st.protoTLS.Reload(); err != nil {
			fail("protocol TLS files", fmt.Errorf("tls-cert/tls-key/tls-client-ca: %w", err))
		} else {
			reloaded = append(reloaded, "tls")
		}
	}
	if st.opsTLS != nil {
		if err := st.opsTLS.Reload(); err != nil {
			fail("ops TLS files", fmt.Errorf("ops-tls-cert/ops-tls-key/ops-tls-client-ca: %w", err))
		} else {
			reloaded = append(reloaded, "ops-tls")
		}
	}
	if st.files.ACL != "" {
		if a, err := st.loadACL(); err != nil {
			fail("access rules", err)
		} else {
			st.acl = a
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

// LogAttrs describe the security settings for the start-up line.
func (st *State) LogAttrs() []any {
	mode := func(rl *server.TLSReloader, clientCA string) string {
		switch {
		case rl == nil:
			return "off"
		case clientCA != "":
			return "mutual"
		}
		return "on"
	}
	attrs := []any{"tls", mode(st.protoTLS, st.files.ClientCA), "ops_tls", mode(st.opsTLS, st.files.OpsCA)}
	if st.acl != nil {
		attrs = append(attrs, "acl_rules", st.acl.Rules())
	}
	return attrs
}
