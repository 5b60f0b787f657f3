package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// TLSFiles names the PEM files of a TLS listener.
type TLSFiles struct {
	// CertFile holds the certificate chain, leaf first; KeyFile its
	// private key. Both required.
	CertFile, KeyFile string
	// ClientCAFile, if not empty, holds the CAs that sign client
	// certificates: a client must present a certificate that one of them
	// signed, or the handshake fails (mutual TLS).
	ClientCAFile string
	// ClientCertOptional relaxes ClientCAFile: a client without a
	// certificate completes the handshake, one with a certificate must
	// have it verified. For the ops listener, whose probes and scrapers
	// carry none; the handler then decides per request.
	ClientCertOptional bool
}

// TLSReloader is the TLS configuration of a listener whose certificate and
// client CA bundle can be reloaded from their files while it serves. Each
// handshake takes the configuration current at its start, so after Reload
// new connections see the new files and established ones carry on.
type TLSReloader struct {
	files TLSFiles
	mu    sync.Mutex // serialises Reload
	cur   atomic.Pointer[tls.Config]
}

// NewTLSReloader loads files, reporting the first that is unusable.
func NewTLSReloader(files TLSFiles) (*TLSReloader, error) {
	r := &TLSReloader{files: files}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again. On an error, the configuration in use is
// kept and the error names the file at fault.
func (r *TLSReloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, err := loadServerTLS(r.files)
	if err != nil {
		return err
	}
	r.cur.Store(cfg)
	return nil
}

// Config returns the tls.Config to serve with: every handshake gets the
// configuration of the last successful load.
func (r *TLSReloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load(), nil
		},
	}
}

// Leaf is the certificate currently served.
func (r *TLSReloader) Leaf() *x509.Certificate {
	return r.cur.Load().Certificates[0].Leaf
}

func loadServerTLS(f TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// No resumption: a resumed session would skip the verification of
		// the client certificate against the bundle loaded now, so a CA
		// removed on reload could still be honoured. Each lock session is
		// one long connection anyway, and the Go client keeps no cache.
		SessionTicketsDisabled: true,
	}
	if f.ClientCAFile != "" {
		pool, err := LoadCertPool(f.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if f.ClientCertOptional {
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return cfg, nil
}

// LoadCertPool reads a PEM bundle of CA certificates; it is an error if
// the file holds none.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", file)
	}
	return pool, nil
}

// handshake runs the TLS handshake of a session that speaks TLS, in the
// session's own goroutine, before its first frame is read, within
// io-timeout (its ClientHello within DefaultHelloTimeout, and a stranger's
// computing when its turn comes: see HandshakeGate). A failed handshake ends the session without an ERROR: there
// is no channel to send one on. A peer that speaks the plain protocol to a
// TLS listener is told ERROR UNAUTHORIZED in plain bytes, since it could
// not read anything else.
func (c *session) handshake() (EndReason, string, bool) {
	tc, ok := c.conn.(*tls.Conn)
	if !ok {
		return 0, "", true
	}
	s := c.srv
	// Bounded by io-timeout, and cut by Shutdown: until the handshake ends
	// nothing can be written to the session, not even ERROR SHUTDOWN.
	ctx, cancel := context.WithTimeout(s.stopCtx, s.cfg.IOTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	s.handshakeEnded(tc, err) // out of the gate's handshakes in progress (tlsgate.go)
	if err == nil {
		return c.admitIdentity() // the cap per client identity (security.go)
	}
	var rhe tls.RecordHeaderError
	if errors.As(err, &rhe) && rhe.Conn != nil {
		c.refusePlain(rhe.Conn)
	}
	s.log.Debug("tls handshake failed", "session", uint64(c.id), "remote", c.remote, "err", err)
	return ReasonTLSHandshake, "", false
}

// refusePlain answers a plain-protocol client on a TLS listener, on the raw
// connection raw, then half-closes it and drains what the client still
// sends for the linger time, so that the answer is not destroyed by a RST.
func (c *session) refusePlain(raw net.Conn) {
	s := c.srv
	until := time.Now().Add(s.linger)
	raw.SetDeadline(until)
	if _, err := raw.Write(wire.AppendError(nil, wire.CodeUnauthorized, "this server requires TLS")); err != nil {
		return
	}
	if cw, ok := raw.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	var buf [256]byte
	for {
		if _, err := raw.Read(buf[:]); err != nil {
			return
		}
	}
}
