package cli

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"

	"github.com/batonlock/baton/internal/servesec"
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

// files are the files the flags name, the ops listener's as it serves
// them.
func (o *securityOptions) files() servesec.Files {
	opsCert, opsKey := o.opsFiles()
	return servesec.Files{Cert: o.tlsCert, Key: o.tlsKey, ClientCA: o.tlsClientCA,
		OpsCert: opsCert, OpsKey: opsKey, OpsCA: o.opsTLSClientCA, ACL: o.aclFile}
}

// security is what start loaded for the flags (internal/servesec), with
// what start reads of it.
type security struct {
	*servesec.State
	o        *securityOptions
	protoTLS *server.TLSReloader // nil: plain TCP
	acl      *server.ACL         // the rules at start; SIGHUP replaces them in the server
}

// loadSecurity reads every file the flags name. Its errors name the flag.
func loadSecurity(o *securityOptions) (*security, error) {
	st, err := servesec.Load(o.files())
	if err != nil {
		return nil, err
	}
	return &security{State: st, o: o, protoTLS: st.ProtoTLS(), acl: st.ACL()}, nil
}

// opsListener, reload and logAttrs are start's and run's names for
// servesec's.
func (sec *security) opsListener(ln net.Listener, gate *server.HandshakeGate) net.Listener {
	return sec.OpsListener(ln, gate)
}

func (sec *security) reload(log *slog.Logger, srv *server.Server) { sec.Reload(log, srv) }

func (sec *security) logAttrs() []any { return sec.LogAttrs() }
