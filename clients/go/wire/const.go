// Package wire holds the bytes of Baton's protocol, version 1: frame types,
// error codes, limits, and the encoders and decoders of every frame. It does
// no I/O of its own; the server and the client read and write the bytes.
package wire

// Version is the protocol version this package speaks.
const Version = 1

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
	// acquireFixed is the fixed part of an ACQUIRE payload:
	// version, flags, lease_ms u32, name_len.
	acquireFixed = 7
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
	// FlagPush in ACQUIRED: the waiter was promoted; the frame is not a reply.
	FlagPush uint8 = 0x01
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
