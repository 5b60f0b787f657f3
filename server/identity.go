package server

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strconv"
)

// Identities are the names a verified client certificate proves: its
// subject CN, then its DNS, URI and email SANs, without duplicates or
// empty ones. The access rules match any of them.
func Identities(cert *x509.Certificate) []string {
	var ids []string
	add := func(s string) {
		if s == "" {
			return
		}
		for _, have := range ids {
			if have == s {
				return
			}
		}
		ids = append(ids, s)
	}
	add(cert.Subject.CommonName)
	for _, d := range cert.DNSNames {
		add(d)
	}
	for _, u := range cert.URIs {
		add(u.String())
	}
	for _, e := range cert.EmailAddresses {
		add(e)
	}
	return ids
}

// VerifiedIdentities are the identities of the client certificate that the
// TLS handshake of cs verified; nil without one. An unverified certificate
// proves nothing and gives no identity.
func VerifiedIdentities(cs *tls.ConnectionState) []string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return Identities(cs.VerifiedChains[0][0])
}

// connIdentities are the verified identities of conn's client, nil for a
// plain connection or a client without a certificate.
func connIdentities(conn net.Conn) []string {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil
	}
	cs := tc.ConnectionState()
	return VerifiedIdentities(&cs)
}

// identityText names a client by its identities for logs and errors.
func identityText(ids []string) string {
	if len(ids) == 0 {
		return "without a verified client certificate"
	}
	return "identity " + quoteList(ids)
}

func quoteList(ids []string) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ", "
		}
		s += strconv.Quote(id)
	}
	return s
}
