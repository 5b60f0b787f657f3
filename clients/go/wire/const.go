// Package wire holds the bytes of Baton's protocol, versions 1, 2 and 3:
// frame types, error codes, limits, the encoders and decoders of every
// frame, and the credential a version 3 claim is resumed with. It does no
// I/O of its own; the server and the client read and write the bytes.
package wire

// Protocol versions. The version byte of an ACQUIRE picks its layout; the
// frames after it are those of version 1, except that a version 3 session's
// ACQUIRED and WAITING may carry a credential.
const (
	// Version1 claims are exclusive: one holder at a time.
	Version1 = 1
	// Version2 adds the SHARED flag and a limit, for semaphores and
	// read/write locks.
	Version2 = 2
	// Version3 adds resume: a claim whose connection the server side ended
	// is carried to a new connection by its client, with the credential the
	// server gave it (docs/protocol.md, section 14).
	Version3 = 3
	// Version is what a client that needs only a mutex sends: version 1,
	// which every server speaks.
	Version = Version1
)

// Frame limits.
const (
	// HeaderSize is the size of a frame header: type u8, length u16.
	HeaderSize = 3
	// MaxPayload is the largest payload either side may send.
	MaxPayload = 1024
	// MaxFrame is the largest frame on the wire.
	MaxFrame = HeaderSize + MaxPayload
	// MaxName is the longest lock name in bytes.
	MaxName = 255
	// MaxOwner is the longest owner text in bytes.
	MaxOwner = 255
	// MaxErrorMessage is the longest ERROR message in bytes.
	MaxErrorMessage = 512
	// MaxLimit is the largest limit of a shared claim (u16).
	MaxLimit = 65535
	// acquireFixed is the fixed part of a version 1 ACQUIRE payload:
	// version, flags, lease_ms u32, name_len.
	acquireFixed = 7
	// acquireFixedV2 is that of version 2, where limit u16 follows lease_ms,
	// and of a version 3 ACQUIRE without RESUME.
	acquireFixedV2 = 9
	// acquireFixedResume is that of a version 3 ACQUIRE with RESUME: the
	// resume block (resume_id u64, generation u32, attempt u16, credential)
	// sits between limit and name_len.
	acquireFixedResume = acquireFixedV2 + resumeBlockSize
	resumeBlockSize    = 8 + 4 + 2 + CredentialSize
	// MaxAcquire is the longest ACQUIRE payload: a version 3 resume with a
	// name and an owner of 255 bytes each.
	MaxAcquire = acquireFixedResume + MaxName + MaxOwner
)

// Type is a frame's type byte.
type Type uint8

// Frame types. Client to server below 0x80, server to client from 0x80.
const (
	TypeAcquire   Type = 0x01
	TypeHeartbeat Type = 0x02
	TypeError     Type = 0x80
	TypeWaiting   Type = 0x81
	TypeAcquired  Type = 0x82
)

func (t Type) String() string {
	switch t {
	case TypeAcquire:
		return "ACQUIRE"
	case TypeHeartbeat:
		return "HEARTBEAT"
	case TypeError:
		return "ERROR"
	case TypeWaiting:
		return "WAITING"
	case TypeAcquired:
		return "ACQUIRED"
	}
	return "type 0x" + hex2(uint8(t))
}

// Flag bits.
const (
	// FlagNoWait in ACQUIRE: answer ERROR BUSY instead of queueing.
	FlagNoWait uint8 = 0x01
	// FlagShared in a version 2 or 3 ACQUIRE: a shared claim, which holds
	// the name together with other shared claims, up to the limit.
	FlagShared uint8 = 0x02
	// FlagResume in a version 3 ACQUIRE: the frame continues a claim, and
	// the resume block follows the limit.
	FlagResume uint8 = 0x04
	// FlagHeld in a version 3 ACQUIRE with FlagResume: the resumed claim
	// holds the name (the resume's ID is its token); clear, it waits (the
	// ID is its ticket).
	FlagHeld uint8 = 0x08
	// FlagPush in ACQUIRED: the waiter was promoted; the frame is not a reply.
	FlagPush uint8 = 0x01
	// FlagCredential in a version 3 session's ACQUIRED: the frame carries
	// the claim's generation and credential (29 bytes, not 9).
	FlagCredential uint8 = 0x02
	// FlagTicket in a version 3 session's WAITING: the frame carries the
	// waiter's ticket, generation and credential (33 bytes, not 5).
	FlagTicket uint8 = 0x01
)

// Code is an ERROR frame's code. Its range is its class.
type Code uint8

// Error codes.
const (
	CodeShutdown   Code = 0x01
	CodeOverloaded Code = 0x02
	// CodeNotLeader: this node of a replicated cluster is not the leader (or
	// just lost leadership); the message is the leader's client address, or
	// empty while no leader is known.
	CodeNotLeader     Code = 0x03
	CodeLeaseExpired  Code = 0x10
	CodeForceReleased Code = 0x11
	CodeKicked        Code = 0x12
	CodeBusy          Code = 0x13
	CodeProtocol      Code = 0x20
	CodeBadRequest    Code = 0x21
	CodeVersion       Code = 0x22
	CodeUnauthorized  Code = 0x23
	// CodeLimitMismatch (version 2): a shared claim's limit differs from the
	// one in force for the name; the message is that limit in decimal.
	CodeLimitMismatch Code = 0x24
	// CodeResumeRefused (version 3): the claim a resume names cannot be
	// continued here; it is lost.
	CodeResumeRefused Code = 0x14
	// CodeSuperseded (version 3): after a crash, a resumed claim with a
	// higher token that cannot hold beside this one won.
	CodeSuperseded Code = 0x15
	// CodeMoved (version 3): the claim of this connection was resumed on a
	// connection with a higher attempt number, or this resume's attempt
	// number is not above the claim's.
	CodeMoved Code = 0x16
	// CodeBadCredential (version 3): a resume's credential is not the one
	// the server computes for the claim it names.
	CodeBadCredential Code = 0x25
)

var codeNames = map[Code]string{
	CodeShutdown:      "SHUTDOWN",
	CodeOverloaded:    "OVERLOADED",
	CodeNotLeader:     "NOT_LEADER",
	CodeLeaseExpired:  "LEASE_EXPIRED",
	CodeForceReleased: "FORCE_RELEASED",
	CodeKicked:        "KICKED",
	CodeBusy:          "BUSY",
	CodeProtocol:      "PROTOCOL",
	CodeBadRequest:    "BAD_REQUEST",
	CodeVersion:       "VERSION",
	CodeUnauthorized:  "UNAUTHORIZED",
	CodeLimitMismatch: "LIMIT_MISMATCH",
	CodeResumeRefused: "RESUME_REFUSED",
	CodeSuperseded:    "SUPERSEDED",
	CodeMoved:         "MOVED",
	CodeBadCredential: "BAD_CREDENTIAL",
}

// String gives the spec's name of the code, or "0xNN" for an unknown one.
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "0x" + hex2(uint8(c))
}

// Class is what a client should make of an error code, known or not.
type Class uint8

// Error classes, by code range.
const (
	ClassUnknown Class = iota
	// ClassServer (0x01-0x0F): a server condition; the client did nothing wrong.
	ClassServer
	// ClassSession (0x10-0x1F): the session was ended by the lock's rules.
	ClassSession
	// ClassClient (0x20-0x2F): a client error; never retried.
	ClassClient
)

func (c Class) String() string {
	switch c {
	case ClassServer:
		return "server condition"
	case ClassSession:
		return "session ended"
	case ClassClient:
		return "client error"
	}
	return "unknown"
}

// Class gives the class of the code from its range.
func (c Code) Class() Class {
	switch {
	case c >= 0x01 && c <= 0x0F:
		return ClassServer
	case c >= 0x10 && c <= 0x1F:
		return ClassSession
	case c >= 0x20 && c <= 0x2F:
		return ClassClient
	}
	return ClassUnknown
}

const hexDigits = "0123456789abcdef"

func hex2(b uint8) string { return string([]byte{hexDigits[b>>4], hexDigits[b&0xF]}) }
