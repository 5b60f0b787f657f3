package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/batonlock/baton/cluster"
)

// clusterOptions are the flags of baton serve for replicated mode
// (docs/operations.md, "Replicated mode").
type clusterOptions struct {
	nodeID, raftAddr, peers string
	join                    bool
	advertiseAddr           string
	advertiseOpsAddr        string
	heartbeatTimeout        time.Duration
	electionTimeout         time.Duration
	leaderLeaseTimeout      time.Duration
	handoverDrain           time.Duration
}

func (o *clusterOptions) register(fs *flag.FlagSet) {
	def := cluster.DefaultConfig()
	fs.StringVar(&o.nodeID, "node-id", "", "this node's `name` in a cluster; with -raft-addr and -peers it turns on replicated mode")
	fs.StringVar(&o.raftAddr, "raft-addr", "", "`host:port` of the Raft listener, reachable by the other nodes")
	fs.StringVar(&o.peers, "peers", "", "the founding members, `id=host:port,...` (Raft addresses), the same on every node, this node included")
	fs.BoolVar(&o.join, "join", false, "start a node that is not in -peers with an empty data-dir and wait to be added (baton cluster add)")
	fs.StringVar(&o.advertiseAddr, "advertise-addr", "", "client `host:port` handed out in NOT_LEADER and /v1/cluster (default -addr)")
	fs.StringVar(&o.advertiseOpsAddr, "advertise-ops-addr", "", "ops `host:port` handed out in /v1/cluster and used by followers to reach the leader (default -ops-addr)")
	fs.DurationVar(&o.heartbeatTimeout, "raft-heartbeat-timeout", def.HeartbeatTimeout, "Raft: how long a follower waits for the leader before it stands for election")
	fs.DurationVar(&o.electionTimeout, "raft-election-timeout", def.ElectionTimeout, "Raft: how long a candidate waits for votes")
	fs.DurationVar(&o.leaderLeaseTimeout, "raft-leader-lease-timeout", def.LeaderLeaseTimeout, "Raft: how long a leader out of contact with a quorum keeps leading (twice it is in every failover grace)")
	fs.DurationVar(&o.handoverDrain, "handover-drain", def.HandoverDrain, "on SIGTERM, how long a leader waits for its holders to close before it hands over")
}

// enabled reports whether any cluster flag asks for replicated mode.
func (o *clusterOptions) enabled() bool {
	return o.nodeID != "" || o.raftAddr != "" || o.peers != "" || o.join
}

// config turns the flags into a cluster.Config (without TLS and Logger),
// with the advertised addresses defaulting to the listeners'.
func (o *clusterOptions) config(addr, opsAddr, dataDir string) (cluster.Config, error) {
	cfg := cluster.DefaultConfig()
	switch {
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
	if host, _, _ := net.SplitHostPort(o.raftAddr); isUnspecified(host) {
		return cfg, fmt.Errorf("raft-addr %s: the other nodes dial it, so it must be a reachable address, not %s", o.raftAddr, host)
	}
	peers, err := parsePeers(o.peers)
	if err != nil {
		return cfg, err
	}
	cfg.NodeID, cfg.RaftAddr, cfg.Peers, cfg.Join, cfg.DataDir = o.nodeID, o.raftAddr, peers, o.join, dataDir
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
	return cfg, nil
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

// raftTLS is the mutual TLS of Raft when the protocol speaks TLS: the
// node's -tls-cert both as server and as client, and -tls-client-ca as the
// CA of every peer in both directions.
func raftTLS(o *securityOptions) (*tls.Config, error) {
	if o.tlsCert == "" {
		return nil, nil
	}
	if o.tlsClientCA == "" {
		return nil, errors.New("replicated mode with tls-cert needs tls-client-ca: Raft between the nodes uses mutual TLS with that CA")
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("raft tls: %v", err)
	}
	pem, err := os.ReadFile(o.tlsClientCA)
	if err != nil {
		return nil, fmt.Errorf("raft tls: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("raft tls: no certificate in %s", o.tlsClientCA)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// openNode starts this node's Raft from the options.
func openNode(o *serveOptions, logger *slog.Logger, stderr io.Writer) (*cluster.Node, error) {
	cfg, err := o.cl.config(o.addr, o.opsAddr, o.dataDir)
	if err != nil {
		return nil, err
	}
	if cfg.TLS, err = raftTLS(&o.sec); err != nil {
		return nil, err
	}
	cfg.Logger = logger
	cfg.RaftLog, cfg.RaftLogJSON = stderr, o.logFormat == "json"
	return cluster.Open(cfg)
}

// proxyTransport is how a follower's ops API reaches the leader's: over
// TLS when the ops listener speaks TLS (verifying the leader with the
// client CA, presenting this node's certificate), else plain HTTP.
func (s *security) proxyTransport() (http.RoundTripper, bool) {
	cert, key := s.o.opsFiles()
	if cert == "" {
		return nil, false
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c, err := tls.LoadX509KeyPair(cert, key); err == nil {
		tc.Certificates = []tls.Certificate{c}
	}
	for _, ca := range []string{s.o.opsTLSClientCA, s.o.tlsClientCA} {
		if pem, err := os.ReadFile(ca); err == nil && ca != "" {
			pool := x509.NewCertPool()
			if pool.AppendCertsFromPEM(pem) {
				tc.RootCAs = pool
				break
			}
		}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	return t, true
}
