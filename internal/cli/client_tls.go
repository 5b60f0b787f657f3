package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
)

// clientTLSOptions are the TLS flags of baton run and the operator
// commands: the server's CA, the client's certificate for mutual TLS, and
// the name to verify.
type clientTLSOptions struct {
	ca, cert, key, serverName string
}

func (o *clientTLSOptions) register(fs *flag.FlagSet, server string) {
	fs.StringVar(&o.ca, "tls-ca", "", "PEM `file` of the CAs that sign the "+server+"'s certificate: speak TLS (default roots: the system's)")
	fs.StringVar(&o.cert, "tls-cert", "", "PEM `file` of this client's certificate, for a server that requires one (needs -tls-key)")
	fs.StringVar(&o.key, "tls-key", "", "PEM `file` of the private key of -tls-cert")
	fs.StringVar(&o.serverName, "tls-server-name", "", "`name` the "+server+"'s certificate must carry; default the host of the address")
}

// enabled reports whether any TLS flag was given: the connection speaks TLS.
func (o *clientTLSOptions) enabled() bool {
	return o.ca != "" || o.cert != "" || o.key != "" || o.serverName != ""
}

// check reports a combination of the flags that cannot work.
func (o *clientTLSOptions) check() error {
	if (o.cert == "") != (o.key == "") {
		return errors.New("tls-cert and tls-key go together: give both or neither")
	}
	return nil
}

// config loads the files into a client configuration; nil if TLS is off.
// Errors name the flag.
func (o *clientTLSOptions) config() (*tls.Config, error) {
	if !o.enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.serverName}
	if o.ca != "" {
		pem, err := os.ReadFile(o.ca)
		if err != nil {
			return nil, fmt.Errorf("tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls-ca %s holds no PEM certificate", o.ca)
		}
		cfg.RootCAs = pool
	}
	if o.cert != "" {
		cert, err := tls.LoadX509KeyPair(o.cert, o.key)
		if err != nil {
			return nil, fmt.Errorf("tls-cert/tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
