package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// clusterOptions are the flags of baton serve for replicated mode
// (docs/operations.md, "Replicated mode").
type clusterOptions struct {
	nodeID, raftAddr, peers string
	raftAdvertise           string
	join                    bool
	advertiseAddr           string
	advertiseOpsAddr        string
	heartbeatTimeout        time.Duration
	electionTimeout         time.Duration
	leaderLeaseTimeout      time.Duration
	handoverDrain           time.Duration
	// Raft's mutual TLS; the certificate and key default to -tls-cert and
	// -tls-key, the CA to -tls-client-ca.
	raftTLSCA, raftTLSCert, raftTLSKey string
}

func (o *clusterOptions) register(fs *flag.FlagSet) {
	def := cluster.DefaultConfig()
	fs.StringVar(&o.nodeID, "node-id", "", "this node's `name` in a cluster; with -raft-addr and -peers it turns on replicated mode")
	fs.StringVar(&o.raftAddr, "raft-addr", "", "`host:port` of the Raft listener; without -raft-advertise, what the other nodes dial")
	fs.StringVar(&o.raftAdvertise, "raft-advertise", "", "`host:port` the other nodes dial to reach this node's Raft listener, as -peers names it (default -raft-addr); a DNS name stays a name in the membership and is resolved at each dial, so a node may come back at a new IP under it")
	fs.StringVar(&o.peers, "peers", "", "the founding members, `id=host:port,...` (Raft addresses), the same on every node, this node included")
	fs.BoolVar(&o.join, "join", false, "start a node that is not a founder with an empty data-dir and wait to be added (baton cluster add); -peers then names the current members, whom it admits until it is added (required over TLS)")
	fs.StringVar(&o.advertiseAddr, "advertise-addr", "", "client `host:port` handed out in NOT_LEADER and /v1/cluster (default -addr)")
	fs.StringVar(&o.advertiseOpsAddr, "advertise-ops-addr", "", "ops `host:port` handed out in /v1/cluster and used by followers to reach the leader (default -ops-addr)")
	fs.DurationVar(&o.heartbeatTimeout, "raft-heartbeat-timeout", def.HeartbeatTimeout, "Raft: how long a follower waits for the leader before it stands for election")
	fs.DurationVar(&o.electionTimeout, "raft-election-timeout", def.ElectionTimeout, "Raft: how long a candidate waits for votes")
	fs.DurationVar(&o.leaderLeaseTimeout, "raft-leader-lease-timeout", def.LeaderLeaseTimeout, "Raft: how long a leader out of contact with a quorum keeps leading (twice it is in every failover grace)")
	fs.DurationVar(&o.handoverDrain, "handover-drain", def.HandoverDrain, "on SIGTERM, how long a leader waits for its holders to close before it hands over")
	fs.StringVar(&o.raftTLSCA, "raft-tls-ca", "", "PEM `file` of the CAs that sign the nodes' certificates: Raft speaks mutual TLS, and a peer must present a certificate naming a current member by the URI SAN baton://node/<id> (default -tls-client-ca)")
	fs.StringVar(&o.raftTLSCert, "raft-tls-cert", "", "PEM `file` of this node's certificate, which names it by the URI SAN baton://node/<node-id> (default -tls-cert)")
	fs.StringVar(&o.raftTLSKey, "raft-tls-key", "", "PEM `file` of the private key of -raft-tls-cert (default -tls-key)")
}

// enabled reports whether any cluster flag asks for replicated mode.
func (o *clusterOptions) enabled() bool {
	return o.nodeID != "" || o.raftAddr != "" || o.raftAdvertise != "" || o.peers != "" || o.join || o.raftTLSFlags()
}

func (o *clusterOptions) raftTLSFlags() bool {
	return o.raftTLSCA != "" || o.raftTLSCert != "" || o.raftTLSKey != ""
}

// raftTLSFiles are the files of Raft's mutual TLS after the defaults from
// the listeners' flags sec, and the flags they came from (for errors);
// cert "" means plain TCP.
func (o *clusterOptions) raftTLSFiles(sec *securityOptions) (cert, key, ca, certFlags, caFlag string) {
	cert, key, certFlags = o.raftTLSCert, o.raftTLSKey, "raft-tls-cert/raft-tls-key"
	if cert == "" && key == "" {
		cert, key, certFlags = sec.tlsCert, sec.tlsKey, "tls-cert/tls-key (Raft's certificate)"
	}
	ca, caFlag = o.raftTLSCA, "raft-tls-ca"
	if ca == "" {
		ca, caFlag = sec.tlsClientCA, "tls-client-ca (Raft's CA)"
	}
	return cert, key, ca, certFlags, caFlag
}

// checkTLS refuses a cluster whose Raft port would speak plain TCP while a
// listener speaks TLS: whoever reaches the Raft port can take the cluster
// over, so it is never the weakest port.
func (o *clusterOptions) checkTLS(sec *securityOptions) error {
	if (o.raftTLSCert == "") != (o.raftTLSKey == "") {
		return errors.New("raft-tls-cert and raft-tls-key go together: give both or neither")
	}
	cert, _, ca, _, _ := o.raftTLSFiles(sec)
	opsCert, _ := sec.opsFiles()
	listener := ""
	switch {
	case sec.tlsCert != "":
		listener = "the protocol listener"
	case opsCert != "":
		listener = "the ops listener"
	}
	switch {
	case listener != "" && cert == "":
		return fmt.Errorf("replicated mode: %s speaks TLS but Raft would not: give -raft-tls-cert and -raft-tls-key, this node's certificate", listener)
	case listener != "" && ca == "":
		return fmt.Errorf("replicated mode: %s speaks TLS but Raft would not: give -raft-tls-ca (or -tls-client-ca), the CA of the nodes' certificates", listener)
	case o.raftTLSCA != "" && cert == "":
		return errors.New("raft-tls-ca needs this node's certificate: give -raft-tls-cert and -raft-tls-key (or -tls-cert and -tls-key)")
	case cert != "" && ca == "":
		return errors.New("raft-tls-cert needs raft-tls-ca (or tls-client-ca), the CA of the nodes' certificates")
	}
	return nil
}

// config turns the flags into a cluster.Config (without TLS and Logger),
// with the advertised addresses defaulting to the listeners', and checks
// Raft's TLS against the listeners' (sec).
func (o *clusterOptions) config(addr, opsAddr, dataDir string, sec *securityOptions) (cluster.Config, error) {
	cfg := cluster.DefaultConfig()
	switch {
	case o.nodeID == "" && o.raftAddr == "" && o.peers == "" && !o.join && o.raftAdvertise != "":
		return cfg, errors.New("raft-advertise is for replicated mode: give -node-id, -raft-addr and -peers too")
	case o.nodeID == "" && o.raftAddr == "" && o.peers == "" && !o.join:
		return cfg, errors.New("raft-tls-ca, raft-tls-cert and raft-tls-key are for replicated mode: give -node-id, -raft-addr and -peers too")
	case o.nodeID == "":
		return cfg, errors.New("replicated mode needs -node-id (with -raft-addr and -peers)")
	case o.raftAddr == "":
		return cfg, errors.New("replicated mode needs -raft-addr")
	case o.peers == "" && !o.join:
		return cfg, errors.New("replicated mode needs -peers (id=host:port,... of the founding members), or -join for a node added later")
	}
	if err := checkAddr("raft-addr", o.raftAddr); err != nil {
		return cfg, err
	}
	if o.raftAdvertise != "" {
		if err := checkAddr("raft-advertise", o.raftAdvertise); err != nil {
			return cfg, err
		}
		if host, port, _ := net.SplitHostPort(o.raftAdvertise); isUnspecified(host) || port == "0" {
			return cfg, fmt.Errorf("raft-advertise %s: the other nodes dial it, so it must be a reachable host:port, such as this node's DNS name", o.raftAdvertise)
		}
	} else if host, _, _ := net.SplitHostPort(o.raftAddr); isUnspecified(host) {
		return cfg, fmt.Errorf("raft-addr %s: the other nodes dial it, so it must be a reachable address, not %s (or give -raft-advertise, the address they dial)", o.raftAddr, host)
	}
	peers, err := parsePeers(o.peers)
	if err != nil {
		return cfg, err
	}
	cfg.NodeID, cfg.RaftAddr, cfg.Peers, cfg.Join, cfg.DataDir = o.nodeID, o.raftAddr, peers, o.join, dataDir
	cfg.RaftAdvertise = o.raftAdvertise
	cfg.Addr, cfg.OpsAddr = o.advertiseAddr, o.advertiseOpsAddr
	if cfg.Addr == "" {
		cfg.Addr = addr
	}
	if cfg.OpsAddr == "" {
		cfg.OpsAddr = opsAddr
	}
	for flagName, a := range map[string]string{"advertise-addr": cfg.Addr, "advertise-ops-addr": cfg.OpsAddr} {
		if err := checkAddr(flagName, a); err != nil {
			return cfg, err
		}
		if host, port, _ := net.SplitHostPort(a); isUnspecified(host) || port == "0" {
			return cfg, fmt.Errorf("%s %s is not an address clients can reach: give -%s", flagName, a, flagName)
		}
	}
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = o.heartbeatTimeout, o.electionTimeout, o.leaderLeaseTimeout
	cfg.HandoverDrain = o.handoverDrain
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, o.checkTLS(sec)
}

func isUnspecified(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// parsePeers reads id=host:port,...
func parsePeers(s string) ([]cluster.Peer, error) {
	if s == "" {
		return nil, nil
	}
	var peers []cluster.Peer
	for _, item := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peers: %q is not id=host:port", item)
		}
		if err := checkAddr("peers", addr); err != nil {
			return nil, fmt.Errorf("peers: member %q: %v", id, err)
		}
		peers = append(peers, cluster.Peer{ID: id, RaftAddr: addr})
	}
	return peers, nil
}

// raftTLS loads Raft's mutual TLS (nil: plain TCP): this node's
// certificate, which must name it (baton://node/<node-id>), as server and
// as client, and the CA of every peer in both directions. Errors name the
// flags.
func (o *clusterOptions) raftTLS(sec *securityOptions) (*tls.Config, error) {
	certFile, keyFile, caFile, certFlags, caFlag := o.raftTLSFiles(sec)
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFlags, err)
	}
	id, err := cluster.NodeIdentity(cert.Leaf)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: %v: the other nodes would refuse this one", certFlags, certFile, err)
	case id != o.nodeID:
		return nil, fmt.Errorf("%s %s names node %q (%s), but this is node %q", certFlags, certFile, id, cluster.NodeURI(id), o.nodeID)
	}
	pool, err := server.LoadCertPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caFlag, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// openNode starts this node's Raft from the options.
func openNode(ctx context.Context, o *serveOptions, logger *slog.Logger, cpu *server.HandshakeCPU) (*cluster.Node, error) {
	cfg, err := o.cl.config(o.addr, o.opsAddr, o.dataDir, &o.sec)
	if err != nil {
		return nil, err
	}
	cfg.HandshakeCPU, cfg.SourcePrefixes = cpu, o.sec.prefixes()
	if cfg.TLS, err = o.cl.raftTLS(&o.sec); err != nil {
		return nil, err
	}
	cfg.Logger = logger
	return cluster.Open(ctx, cfg)
}

// proxyTransport is how a follower's ops API reaches the leader's. When
// the ops listener speaks TLS (and so Raft does), it is the forward
// channel: mutual TLS with the node certificates, each side admitting only
// a current member, on which the follower passes the caller's identity and
// never a credential; the leader's ops listener takes the channel's
// handshakes (opsListener). Else plain HTTP.
func (s *security) proxyTransport(node *cluster.Node) (http.RoundTripper, bool) {
	if cert, _ := s.o.opsFiles(); cert == "" {
		return nil, false
	}
	forward, client := node.ForwardTLS(ops.ForwardProtocol)
	s.SetForward(ops.ForwardProtocol, forward)
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = client
	t.ForceAttemptHTTP2 = false // the channel speaks HTTP/1.1 (the leader offers nothing else on it)
	return t, true
}
