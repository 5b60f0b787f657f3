package fence

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Header is the HTTP header that carries a lock's fencing token:
//
//	Baton-Fence: jobs/nightly=1099511627777
//
// The name is percent-encoded (bytes other than letters, digits, "-._~"
// and "/"), the token is decimal. A request may carry several, as
// several header lines or one comma-separated list.
const Header = "Baton-Fence"

// HeaderValue is h's Baton-Fence value, or an error for a Holder that no
// mark can fence (see the package doc).
func HeaderValue(h Holder) (string, error) {
	name, token, err := check(h)
	if err != nil {
		return "", err
	}
	return escapeName(name) + "=" + decimal(token), nil
}

// Transport stamps h's Baton-Fence header on every request it sends
// through Base (http.DefaultTransport when nil), for a service behind
// Guard:
//
//	client := &http.Client{Transport: &fence.Transport{Holder: l}}
type Transport struct {
	Base   http.RoundTripper
	Holder Holder
}

// RoundTrip adds the header to a clone of req, as a RoundTripper must
// not change the request it is given.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	v, err := HeaderValue(t.Holder)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Add(Header, v)
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Fence is one lock's token on a request.
type Fence struct {
	Lock  string
	Token uint64
}

// errNoFence: a request without the header.
var errNoFence = errors.New("no " + Header + " header")

// ParseHeader reads every Baton-Fence of h. A lock named twice is an
// error: a client that sends two tokens of one lock cannot say which it
// holds.
func ParseHeader(h http.Header) ([]Fence, error) {
	var out []Fence
	for _, line := range h.Values(Header) {
		for _, item := range strings.Split(line, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			f, err := parseFence(item)
			if err != nil {
				return nil, err
			}
			for _, o := range out {
				if o.Lock == f.Lock {
					return nil, fmt.Errorf("%s names lock %q twice", Header, f.Lock)
				}
			}
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, errNoFence
	}
	return out, nil
}

func parseFence(item string) (Fence, error) {
	i := strings.LastIndexByte(item, '=')
	if i <= 0 {
		return Fence{}, fmt.Errorf("%s %q is not name=token", Header, item)
	}
	name, err := unescapeName(item[:i])
	if err != nil || name == "" {
		return Fence{}, fmt.Errorf("%s %q: the name is not percent-encoded text", Header, item)
	}
	digits := item[i+1:]
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return Fence{}, fmt.Errorf("%s %q: the token is not a decimal number", Header, item)
	}
	token, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || token == 0 {
		return Fence{}, fmt.Errorf("%s %q: the token is not a fencing token (1 to 18446744073709551615)", Header, item)
	}
	return Fence{Lock: name, Token: token}, nil
}
