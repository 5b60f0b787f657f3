package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
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
	var ln net.Listener
	var err error
	if cfg.TLS == nil {
		ln, err = net.Listen("tcp", cfg.RaftAddr)
	} else {
		ln, err = tls.Listen("tcp", cfg.RaftAddr, serverTLS(cfg.TLS))
	}
	if err != nil {
		return nil, fmt.Errorf("raft listener %s: %w", cfg.RaftAddr, err)
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("raft-addr %q: %w", cfg.RaftAddr, err)
	}
	st := &stream{ln: ln, adv: adv, tls: cfg.TLS, conns: map[net.Conn]struct{}{}}
	return raft.NewNetworkTransportWithLogger(st, transportPool, transportTimeout, logger), nil
}

// serverTLS is the accepting side of Raft's mutual TLS: the dialing node's
// certificate must chain to the cluster's CA (c.RootCAs). Its extended key
// usage is not checked, so that one node certificate, often issued for
// server use only, serves both directions.
func serverTLS(c *tls.Config) *tls.Config {
	s := c.Clone()
	s.ClientAuth = tls.RequireAnyClientCert
	s.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("raft tls: the peer sent no certificate")
		}
		certs := make([]*x509.Certificate, 0, len(raw))
		for _, r := range raw {
			cert, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("raft tls: peer certificate: %w", err)
			}
			certs = append(certs, cert)
		}
		inter := x509.NewCertPool()
		for _, cert := range certs[1:] {
			inter.AddCert(cert)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: c.RootCAs, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("raft tls: peer certificate not from the cluster's CA: %w", err)
		}
		return nil
	}
	return s
}

// stream is Raft's raft.StreamLayer: plain TCP, or mutual TLS in which
// both sides present a certificate of the cluster's CA (tls.RootCAs) and
// verify the other's, the dialer also checking that it names the Raft
// host. It keeps every connection, accepted or dialed, so that Close ends
// them all: raft's NetworkTransport closes only its listener, and a peer
// that never closes would keep a reader goroutine for ever.
type stream struct {
	ln  net.Listener
	adv net.Addr
	tls *tls.Config

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (s *stream) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	s.conns[c] = struct{}{}
	return &trackedConn{Conn: c, s: s}, nil
}

func (s *stream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

func (s *stream) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
	s.mu.Unlock()
	return s.ln.Close()
}

func (s *stream) Addr() net.Addr { return s.adv }

func (s *stream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if s.tls == nil {
		c, err = d.Dial("tcp", string(addr))
	} else {
		c, err = tls.DialWithDialer(d, "tcp", string(addr), s.tls)
	}
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

// trackedConn leaves its stream's set when closed.
type trackedConn struct {
	net.Conn
	s *stream
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c.Conn)
	c.s.mu.Unlock()
	return c.Conn.Close()
}
