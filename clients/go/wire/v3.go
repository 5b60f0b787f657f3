package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"sync"
)

// Sizes of version 3.
const (
	// CredentialSize is the size of a credential: the first 16 bytes of an
	// HMAC-SHA256.
	CredentialSize = 16
	// KeySize is the size of the secret key a server computes credentials
	// with.
	KeySize = 32
	// ClientKeySize is the size of a client key: SHA-256 of the client
	// certificate's SubjectPublicKeyInfo.
	ClientKeySize = sha256.Size

	acquiredCredentialSize = acquiredSize + 4 + CredentialSize    // 29
	waitingTicketSize      = waitingSize + 8 + 4 + CredentialSize // 33

	credentialLabel = "baton v3 claim"
	// maxCredentialMessage is the longest message a credential is computed
	// over: label, role, a cluster id and a name of 255 bytes, a client key.
	maxCredentialMessage = len(credentialLabel) + 1 + 1 + 255 + 4 + 1 + 2 + 4 + 8 + 1 + ClientKeySize + 1 + MaxName
)

// Credential is what lets a connection take a claim over: 16 bytes the
// server computes with its key. It prints redacted, whatever the verb,
// and marshals as text to "redacted", so that it never reaches a log;
// use the bytes (c[:]) only to put them on the wire.
type Credential [CredentialSize]byte

const redacted = "credential(redacted)"

// String returns a redacted text, not the bytes.
func (Credential) String() string { return redacted }

// GoString returns a redacted text, not the bytes.
func (Credential) GoString() string { return "wire.Credential{redacted}" }

// Format prints a redacted text for every verb.
func (Credential) Format(f fmt.State, verb rune) { io.WriteString(f, redacted) }

// MarshalText marshals the credential as the word "redacted", so that
// encoding/json and log/slog never write its bytes.
func (Credential) MarshalText() ([]byte, error) { return []byte("redacted"), nil }

// Equal reports whether c and d are the same, in constant time.
func (c Credential) Equal(d Credential) bool { return subtle.ConstantTimeCompare(c[:], d[:]) == 1 }

// Acquired is an ACQUIRED frame of a version 3 session: a grant (the reply
// to an ACQUIRE, or the push that promotes a waiter) or a heartbeat reply,
// with the claim's credential when it carries one.
type Acquired struct {
	Push  bool
	Token uint64 // never 0
	// WithCredential says the frame carries Generation and Credential
	// (FlagCredential, 29 bytes); without it the frame is the 9-byte
	// ACQUIRED of version 1.
	WithCredential bool
	Generation     uint32 // never 0 with a credential
	Credential     Credential
}

// AppendAcquiredV3 appends an ACQUIRED frame of a version 3 session to
// dst: 29 bytes of payload with a credential, else the frame AppendAcquired
// makes.
func AppendAcquiredV3(dst []byte, a Acquired) []byte {
	if !a.WithCredential {
		return AppendAcquired(dst, a.Push, a.Token)
	}
	flags := FlagCredential
	if a.Push {
		flags |= FlagPush
	}
	dst = append(dst, byte(TypeAcquired), 0, acquiredCredentialSize, flags)
	dst = binary.BigEndian.AppendUint64(dst, a.Token)
	dst = binary.BigEndian.AppendUint32(dst, a.Generation)
	return append(dst, a.Credential[:]...)
}

// DecodeAcquiredV3 parses an ACQUIRED payload of a version 3 session: 9
// bytes without FlagCredential, or 29 with it. A token of 0, a generation
// of 0, or a size that disagrees with FlagCredential is a PROTOCOL error.
// Flag bits it does not know are ignored, as DecodeAcquired does.
func DecodeAcquiredV3(p []byte) (Acquired, error) {
	if len(p) != acquiredSize && len(p) != acquiredCredentialSize {
		return Acquired{}, errorf(CodeProtocol, "ACQUIRED payload of %d bytes, want %d or %d", len(p), acquiredSize, acquiredCredentialSize)
	}
	a := Acquired{Push: p[0]&FlagPush != 0, Token: binary.BigEndian.Uint64(p[1:9])}
	withCred := p[0]&FlagCredential != 0
	switch {
	case withCred != (len(p) == acquiredCredentialSize):
		return Acquired{}, errorf(CodeProtocol, "ACQUIRED payload of %d bytes with flags 0x%02x: CREDENTIAL and 29 bytes go together", len(p), p[0])
	case a.Token == 0:
		return Acquired{}, errorf(CodeProtocol, "ACQUIRED with token 0")
	}
	if withCred {
		a.WithCredential = true
		a.Generation = binary.BigEndian.Uint32(p[9:13])
		if a.Generation == 0 {
			return Acquired{}, errorf(CodeProtocol, "ACQUIRED with a credential of generation 0")
		}
		copy(a.Credential[:], p[13:acquiredCredentialSize])
	}
	return a, nil
}

// Waiting is a WAITING frame of a version 3 session, with the waiter's
// ticket and credential when it carries them.
type Waiting struct {
	Position uint32
	// WithTicket says the frame carries Ticket, Generation and Credential
	// (FlagTicket, 33 bytes); without it the frame is the 5-byte WAITING of
	// version 1.
	WithTicket bool
	Ticket     uint64 // never 0 with a ticket
	Generation uint32 // never 0 with a ticket
	Credential Credential
}

// AppendWaitingV3 appends a WAITING frame of a version 3 session to dst:
// 33 bytes of payload with a ticket, else the frame AppendWaiting makes.
func AppendWaitingV3(dst []byte, w Waiting) []byte {
	if !w.WithTicket {
		return AppendWaiting(dst, w.Position)
	}
	dst = append(dst, byte(TypeWaiting), 0, waitingTicketSize, FlagTicket)
	dst = binary.BigEndian.AppendUint32(dst, w.Position)
	dst = binary.BigEndian.AppendUint64(dst, w.Ticket)
	dst = binary.BigEndian.AppendUint32(dst, w.Generation)
	return append(dst, w.Credential[:]...)
}

// DecodeWaitingV3 parses a WAITING payload of a version 3 session: 5 bytes
// without FlagTicket, or 33 with it. A ticket or generation of 0, or a
// size that disagrees with FlagTicket, is a PROTOCOL error; other flag
// bits are ignored.
func DecodeWaitingV3(p []byte) (Waiting, error) {
	if len(p) != waitingSize && len(p) != waitingTicketSize {
		return Waiting{}, errorf(CodeProtocol, "WAITING payload of %d bytes, want %d or %d", len(p), waitingSize, waitingTicketSize)
	}
	withTicket := p[0]&FlagTicket != 0
	if withTicket != (len(p) == waitingTicketSize) {
		return Waiting{}, errorf(CodeProtocol, "WAITING payload of %d bytes with flags 0x%02x: TICKET and 33 bytes go together", len(p), p[0])
	}
	w := Waiting{Position: binary.BigEndian.Uint32(p[1:5])}
	if withTicket {
		w.WithTicket = true
		w.Ticket = binary.BigEndian.Uint64(p[5:13])
		w.Generation = binary.BigEndian.Uint32(p[13:17])
		switch {
		case w.Ticket == 0:
			return Waiting{}, errorf(CodeProtocol, "WAITING with ticket 0")
		case w.Generation == 0:
			return Waiting{}, errorf(CodeProtocol, "WAITING with a credential of generation 0")
		}
		copy(w.Credential[:], p[17:waitingTicketSize])
	}
	return w, nil
}

// Role is what a credential's id is: a holder's token or a waiter's ticket.
type Role uint8

// Roles, as the byte the credential's message carries.
const (
	RoleHolder Role = 'H'
	RoleWaiter Role = 'W'
)

// Claim is what a credential covers (docs/protocol.md, section 14).
type Claim struct {
	Role Role
	// ClusterID is the cluster's id, at most 255 bytes; "" for a
	// standalone server.
	ClusterID  string
	Generation uint32
	Shared     bool
	Limit      uint16 // 1 for an exclusive claim
	LeaseMs    uint32
	ID         uint64 // the token (RoleHolder) or the ticket (RoleWaiter)
	// ClientKey is ClientKeyHash of the certificate the client presented
	// on the connection, under mutual TLS; empty without one.
	ClientKey []byte
	Name      string
}

// ClientKeyHash is the client key of a credential: SHA-256 of the DER
// SubjectPublicKeyInfo of the certificate the client presented
// (x509.Certificate.RawSubjectPublicKeyInfo), so that a credential works
// only for a client with the same key.
func ClientKeyHash(spki []byte) [ClientKeySize]byte { return sha256.Sum256(spki) }

// AppendCredentialMessage appends to dst the message a credential is the
// MAC of. It panics if the claim's Role is not RoleHolder or RoleWaiter,
// its ClusterID is longer than 255 bytes, its ClientKey is neither empty
// nor ClientKeySize bytes, or its Name is empty or longer than MaxName:
// a server builds claims from checked frames, so these are its bugs.
func AppendCredentialMessage(dst []byte, c Claim) []byte { return appendCredentialMessage(dst, &c) }

func appendCredentialMessage(dst []byte, c *Claim) []byte {
	switch {
	case c.Role != RoleHolder && c.Role != RoleWaiter:
		panic(fmt.Sprintf("wire: credential of role 0x%02x, want H or W", uint8(c.Role)))
	case len(c.ClusterID) > 255:
		panic(fmt.Sprintf("wire: cluster id of %d bytes exceeds 255", len(c.ClusterID)))
	case len(c.ClientKey) != 0 && len(c.ClientKey) != ClientKeySize:
		panic(fmt.Sprintf("wire: client key of %d bytes, want 0 or %d", len(c.ClientKey), ClientKeySize))
	case len(c.Name) == 0 || len(c.Name) > MaxName:
		panic(fmt.Sprintf("wire: credential for a name of %d bytes, want 1 to %d", len(c.Name), MaxName))
	}
	shared := byte(0)
	if c.Shared {
		shared = 1
	}
	dst = append(dst, credentialLabel...)
	dst = append(dst, byte(c.Role), byte(len(c.ClusterID)))
	dst = append(dst, c.ClusterID...)
	dst = binary.BigEndian.AppendUint32(dst, c.Generation)
	dst = append(dst, shared)
	dst = binary.BigEndian.AppendUint16(dst, c.Limit)
	dst = binary.BigEndian.AppendUint32(dst, c.LeaseMs)
	dst = binary.BigEndian.AppendUint64(dst, c.ID)
	dst = append(dst, byte(len(c.ClientKey)))
	dst = append(dst, c.ClientKey...)
	dst = append(dst, byte(len(c.Name)))
	return append(dst, c.Name...)
}

// Minter computes and checks credentials with one key. It is safe for
// concurrent use, and a computation allocates nothing once each goroutine
// that uses it has warmed its pool.
type Minter struct {
	pool sync.Pool // of *mintState
}

// mintState is one goroutine's scratch: the keyed HMAC and the buffers it
// writes into.
type mintState struct {
	mac hash.Hash
	msg [maxCredentialMessage]byte
	sum [sha256.Size]byte
}

// NewMinter returns a Minter for key, which must be KeySize bytes. It
// keeps a copy of the key: the caller may clear its own.
func NewMinter(key []byte) (*Minter, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("wire: resume key of %d bytes, want %d", len(key), KeySize)
	}
	k := append([]byte(nil), key...)
	m := &Minter{}
	m.pool.New = func() any { return &mintState{mac: hmac.New(sha256.New, k)} }
	return m, nil
}

// Credential computes the claim's credential: the first 16 bytes of
// HMAC-SHA256 over its message (AppendCredentialMessage, which says when
// it panics).
func (m *Minter) Credential(c Claim) Credential {
	st := m.pool.Get().(*mintState)
	msg := appendCredentialMessage(st.msg[:0], &c)
	st.mac.Reset()
	st.mac.Write(msg)
	sum := st.mac.Sum(st.sum[:0])
	var cred Credential
	copy(cred[:], sum)
	m.pool.Put(st)
	return cred
}

// Verify reports, in constant time, whether cred is the claim's
// credential.
func (m *Minter) Verify(c Claim, cred Credential) bool {
	want := m.Credential(c)
	return hmac.Equal(want[:], cred[:])
}
