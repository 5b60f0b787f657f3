package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/batonlock/baton/clients/go/wire"
)

// maxACLFile caps the access rules file: it is read whole.
const maxACLFile = 1 << 20

// AnyClient in a rule's clients matches every client with a verified
// certificate.
const AnyClient = "*"

// ACL is a set of access rules: which client identities (see Identities)
// may acquire which locks, and take which admin actions. What no rule
// allows is refused. It is immutable once made; the server swaps a new one
// in on reload (SetACL).
//
// The file is JSON:
//
//	{"rules": [
//	  {"clients": ["deployer", "spiffe://example.org/deployer"],
//	   "locks": ["deploy/"], "admin": ["deploy/"]},
//	  {"clients": ["*"], "locks": ["shared/"]}
//	]}
//
// A rule applies to a client if one of its identities equals one of the
// rule's clients ("*": any verified client). "locks" lists the lock-name
// prefixes the client may acquire, "admin" those it may force-release and
// kick waiters of; "" is the prefix of every name. "kinds", if given,
// lists the kinds of claim the rule's "locks" allow (see Kind); without
// it they allow every kind.
type ACL struct {
	rules []aclRule
}

type aclRule struct {
	Clients []string `json:"clients"`
	Locks   []string `json:"locks"`
	Admin   []string `json:"admin"`
	Kinds   []string `json:"kinds"`
	// kinds is Kinds parsed; nil when the rule allows every kind.
	kinds []kindGrant
}

// A Kind is the kind of a claim, as the access rules judge it: exclusive,
// or shared with its limit (wire.MaxLimit for a reader of a read/write
// lock, N for a slot of a semaphore of N).
type Kind struct {
	Shared bool
	Limit  int // of a shared claim; ignored when not Shared
}

func (k Kind) String() string {
	switch {
	case !k.Shared:
		return "an exclusive claim"
	case k.Limit == wire.MaxLimit:
		return "a shared claim (a reader)"
	}
	return fmt.Sprintf("a shared claim with limit %d", k.Limit)
}

// kindGrant is one entry of a rule's "kinds": "exclusive"; "shared", a
// reader of a read/write lock (a shared claim with the limit wire.MaxLimit,
// as every client's reader claims); "limit:N", a slot of a semaphore of N;
// "limit:*", a shared claim with any limit.
type kindGrant struct {
	exclusive bool
	limit     int // 0: any limit
}

func parseKind(s string) (kindGrant, error) {
	switch s {
	case "exclusive":
		return kindGrant{exclusive: true}, nil
	case "shared":
		return kindGrant{limit: wire.MaxLimit}, nil
	case "limit:*":
		return kindGrant{}, nil
	}
	if n, ok := strings.CutPrefix(s, "limit:"); ok {
		if v, err := strconv.Atoi(n); err == nil && v >= 1 && v <= wire.MaxLimit {
			return kindGrant{limit: v}, nil
		}
		return kindGrant{}, fmt.Errorf("kind %q: the limit must be * or 1 to %d", s, wire.MaxLimit)
	}
	return kindGrant{}, fmt.Errorf(`unknown kind %q: want "exclusive", "shared", "limit:N" or "limit:*"`, s)
}

// allows reports whether the grant allows a claim of kind k.
func (g kindGrant) allows(k Kind) bool {
	if !k.Shared {
		return g.exclusive
	}
	return !g.exclusive && (g.limit == 0 || g.limit == k.Limit)
}

// ParseACL reads access rules from JSON data. It refuses unknown fields,
// rules without clients or without any grant, and prefixes longer than a
// lock name can be.
func ParseACL(data []byte) (*ACL, error) {
	var f struct {
		Rules *[]aclRule `json:"rules"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a JSON rules object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("text after the JSON rules object")
	}
	if f.Rules == nil {
		return nil, errors.New(`no "rules" list`)
	}
	for i, r := range *f.Rules {
		n := i + 1
		if len(r.Clients) == 0 {
			return nil, fmt.Errorf("rule %d has no clients", n)
		}
		for _, c := range r.Clients {
			if c == "" {
				return nil, fmt.Errorf("rule %d has an empty client", n)
			}
		}
		if len(r.Locks) == 0 && len(r.Admin) == 0 {
			return nil, fmt.Errorf(`rule %d grants nothing: give "locks" or "admin"`, n)
		}
		if r.Kinds != nil {
			if len(r.Locks) == 0 {
				return nil, fmt.Errorf(`rule %d gives "kinds" but no "locks" for them`, n)
			}
			if len(r.Kinds) == 0 {
				return nil, fmt.Errorf(`rule %d has an empty "kinds": leave it out to allow every kind`, n)
			}
			for _, k := range r.Kinds {
				g, err := parseKind(k)
				if err != nil {
					return nil, fmt.Errorf("rule %d: %w", n, err)
				}
				(*f.Rules)[i].kinds = append((*f.Rules)[i].kinds, g)
			}
		}
		for _, p := range append(append([]string(nil), r.Locks...), r.Admin...) {
			if len(p) > wire.MaxName {
				return nil, fmt.Errorf("rule %d: prefix of %d bytes is longer than any lock name (%d)", n, len(p), wire.MaxName)
			}
		}
	}
	return &ACL{rules: *f.Rules}, nil
}

// LoadACL reads the access rules file; errors name the file.
func LoadACL(file string) (*ACL, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxACLFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxACLFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, maxACLFile)
	}
	a, err := ParseACL(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return a, nil
}

// MayAcquire reports whether a client with identities ids may acquire lock
// name, with a claim of some kind.
func (a *ACL) MayAcquire(ids []string, name string) bool {
	return a.allows(ids, name, func(r *aclRule) []string { return r.Locks })
}

// MayClaim reports whether a client with identities ids may acquire lock
// name with a claim of kind k: some rule that applies to it gives a prefix
// of name in "locks" and allows k (every kind, without "kinds").
func (a *ACL) MayClaim(ids []string, name string, k Kind) bool {
	if len(ids) == 0 {
		return false
	}
	for i := range a.rules {
		r := &a.rules[i]
		if !r.appliesTo(ids) || !hasPrefixOf(r.Locks, name) {
			continue
		}
		if r.kinds == nil {
			return true
		}
		for _, g := range r.kinds {
			if g.allows(k) {
				return true
			}
		}
	}
	return false
}

func hasPrefixOf(prefixes []string, name string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// MayAdmin reports whether a client with identities ids may force-release
// lock name or kick its waiters.
func (a *ACL) MayAdmin(ids []string, name string) bool {
	return a.allows(ids, name, func(r *aclRule) []string { return r.Admin })
}

// HasAdminGrant reports whether some rule grants admin actions, on any
// prefix, to a client with identities ids.
func (a *ACL) HasAdminGrant(ids []string) bool {
	if len(ids) == 0 {
		return false
	}
	for i := range a.rules {
		if r := &a.rules[i]; len(r.Admin) > 0 && r.appliesTo(ids) {
			return true
		}
	}
	return false
}

// HasAdmin reports whether some rule grants admin actions.
func (a *ACL) HasAdmin() bool {
	for _, r := range a.rules {
		if len(r.Admin) > 0 {
			return true
		}
	}
	return false
}

// Rules is the number of rules.
func (a *ACL) Rules() int { return len(a.rules) }

func (a *ACL) allows(ids []string, name string, prefixes func(*aclRule) []string) bool {
	if len(ids) == 0 {
		return false
	}
	for i := range a.rules {
		r := &a.rules[i]
		if r.appliesTo(ids) && hasPrefixOf(prefixes(r), name) {
			return true
		}
	}
	return false
}

func (r *aclRule) appliesTo(ids []string) bool {
	for _, c := range r.Clients {
		if c == AnyClient {
			return true
		}
		for _, id := range ids {
			if id == c {
				return true
			}
		}
	}
	return false
}
