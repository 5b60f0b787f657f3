package cluster

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft transport pool and I/O bounds.
const (
	transportPool    = 3
	transportTimeout = 10 * time.Second
)

// newTransport is plain TCP, or mutual TLS when cfg.TLS is set: anyone who
// reaches an unprotected Raft port can vote, append log entries and read
// the replicated state.
func newTransport(cfg Config, logger hclog.Logger) (raft.Transport, error) {
	if cfg.TLS == nil {
		addr, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
		if err != nil {
			return nil, fmt.Errorf("raft-addr %q: %w", cfg.RaftAddr, err)
		}
		t, err := raft.NewTCPTransportWithLogger(cfg.RaftAddr, addr, transportPool, transportTimeout, logger)
		if err != nil {
			return nil, fmt.Errorf("raft listener %s: %w", cfg.RaftAddr, err)
		}
		return t, nil
	}
	ln, err := tls.Listen("tcp", cfg.RaftAddr, cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("raft listener %s: %w", cfg.RaftAddr, err)
	}
	return raft.NewNetworkTransportWithLogger(&tlsStream{ln: ln, cfg: cfg.TLS}, transportPool, transportTimeout, logger), nil
}

// tlsStream is a raft.StreamLayer over mutual TLS: both sides present a
// certificate of the cluster's CA (cfg has RootCAs, ClientCAs and
// RequireAndVerifyClientCert) and verify the other's.
type tlsStream struct {
	ln  net.Listener
	cfg *tls.Config
}

func (t *tlsStream) Accept() (net.Conn, error) { return t.ln.Accept() }
func (t *tlsStream) Close() error              { return t.ln.Close() }
func (t *tlsStream) Addr() net.Addr            { return t.ln.Addr() }

func (t *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", string(addr), t.cfg)
	if err != nil {
		return nil, err
	}
	return conn, nil
}
