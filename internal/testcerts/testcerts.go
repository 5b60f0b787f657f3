// Package testcerts makes certificate authorities and certificates for
// tests with crypto/x509: a CA, server certificates for 127.0.0.1 and
// localhost, cluster node certificates, client certificates with a subject
// CN and SANs, expired ones.
// It is imported only by tests.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that signs certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the CA certificate, PEM
}

// NewCA makes a self-signed CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse CA %s: %v", name, err)
	}
	return &CA{Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der)}
}

// Pool is a cert pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is a certificate signed by a CA, with its key.
type Leaf struct {
	TLS     tls.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Spec describes a certificate to issue.
type Spec struct {
	CN        string
	DNS       []string
	IPs       []net.IP
	URIs      []string
	Emails    []string
	NotBefore time.Time // zero: an hour ago
	NotAfter  time.Time // zero: a day from now
	Server    bool      // server auth; else client auth
	// Key is the certificate's key; nil: a new one. A renewal keeps it.
	Key *ecdsa.PrivateKey
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB) *Leaf {
	t.Helper()
	return ca.Issue(t, Spec{CN: "baton test server", DNS: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Server: true})
}

// Node issues the certificate of cluster node id: its identity is the URI
// SAN baton://node/<id>; like Server, it is for server auth only (the
// usual node certificate) and names 127.0.0.1, ::1 and localhost.
func (ca *CA) Node(t testing.TB, id string) *Leaf {
	t.Helper()
	return ca.Issue(t, Spec{CN: "baton node " + id, DNS: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, URIs: []string{"baton://node/" + id}, Server: true})
}

// Client issues a client certificate with subject CN cn and the given DNS
// SANs.
func (ca *CA) Client(t testing.TB, cn string, dns ...string) *Leaf {
	t.Helper()
	return ca.Issue(t, Spec{CN: cn, DNS: dns})
}

// Issue signs a certificate as spec says.
func (ca *CA) Issue(t testing.TB, spec Spec) *Leaf {
	t.Helper()
	key := spec.Key
	if key == nil {
		key = newKey(t)
	}
	nb, na := spec.NotBefore, spec.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	if na.IsZero() {
		na = time.Now().Add(24 * time.Hour)
	}
	usage := x509.ExtKeyUsageClientAuth
	if spec.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial(t),
		Subject:        pkix.Name{CommonName: spec.CN},
		NotBefore:      nb,
		NotAfter:       na,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{usage},
		DNSNames:       spec.DNS,
		IPAddresses:    spec.IPs,
		EmailAddresses: spec.Emails,
	}
	for _, u := range spec.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("URI SAN %q: %v", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatalf("issue certificate %q: %v", spec.CN, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse certificate %q: %v", spec.CN, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return &Leaf{
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		CertPEM: pemBlock("CERTIFICATE", der),
		KeyPEM:  pemBlock("PRIVATE KEY", kder),
	}
}

// Files are the PEM files of a certificate and its key.
type Files struct{ Cert, Key string }

// Write writes the certificate and key into dir as name.crt and name.key.
func (l *Leaf) Write(t testing.TB, dir, name string) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	WriteFile(t, f.Cert, l.CertPEM)
	WriteFile(t, f.Key, l.KeyPEM)
	return f
}

// Bundle is the PEM of the given CAs, one after the other.
func Bundle(cas ...*CA) []byte {
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.PEM...)
	}
	return b
}

// WriteFile writes data to path (mode 0600), replacing it atomically so that
// a reload never sees half a file.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
