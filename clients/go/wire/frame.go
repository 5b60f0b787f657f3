package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Error is a protocol error: the code an ERROR frame carries and its message.
// The server answers a bad frame with it; the client returns the ERROR frames
// it receives as one, so callers can use errors.As and inspect Code.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return "baton: " + e.Code.String()
	}
	return "baton: " + e.Code.String() + ": " + e.Msg
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &wire.Error{Code: wire.CodeBusy}) works. A nil *Error
// target matches nothing.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Header is the 3-byte start of every frame.
type Header struct {
	Type   Type
	Length uint16 // payload bytes
}

// ParseHeader reads a header from the first HeaderSize bytes of b, which
// must hold at least that many. It refuses a length above MaxPayload with a
// PROTOCOL error, so the caller never reads, or allocates for, such a payload.
func ParseHeader(b []byte) (Header, error) {
	h := Header{Type: Type(b[0]), Length: binary.BigEndian.Uint16(b[1:3])}
	if h.Length > MaxPayload {
		return h, errorf(CodeProtocol, "frame length %d exceeds the limit of %d", h.Length, MaxPayload)
	}
	return h, nil
}

// Split finds the first complete frame in buf. It returns its header, its
// payload (a slice of buf) and the number of bytes it takes. When buf holds
// less than a whole frame, n is 0 and err is nil: read more and call again.
// An oversize length is an error as soon as the header is complete.
func Split(buf []byte) (h Header, payload []byte, n int, err error) {
	if len(buf) < HeaderSize {
		return Header{}, nil, 0, nil
	}
	h, err = ParseHeader(buf)
	if err != nil {
		return h, nil, 0, err
	}
	end := HeaderSize + int(h.Length)
	if len(buf) < end {
		return h, nil, 0, nil
	}
	return h, buf[HeaderSize:end:end], end, nil
}

// AppendFrame appends a frame of type t around payload to dst.
// It panics if payload is longer than MaxPayload: that is a bug in the caller.
func AppendFrame(dst []byte, t Type, payload []byte) []byte {
	if len(payload) > MaxPayload {
		panic(fmt.Sprintf("wire: payload of %d bytes exceeds %d", len(payload), MaxPayload))
	}
	dst = append(dst, byte(t), byte(len(payload)>>8), byte(len(payload)))
	return append(dst, payload...)
}

// Acquire is the payload of an ACQUIRE frame.
type Acquire struct {
	Version uint8 // Version1, Version2 or Version3
	// Flags: FlagNoWait; FlagShared in versions 2 and 3; FlagResume and
	// FlagHeld in version 3.
	Flags   uint8
	LeaseMs uint32 // 1 .. 4294967295
	// Limit is how many shared claims may hold the name at once, 1 ..
	// MaxLimit, and 1 in an exclusive claim. Versions 2 and 3 only: 0 in
	// version 1, which has no such field.
	Limit uint16
	// Resume is the claim a version 3 ACQUIRE with FlagResume continues;
	// the zero Resume otherwise.
	Resume Resume
	Name   string // 1 .. 255 bytes, see CheckName
	Owner  string // 0 .. 255 bytes, see CheckOwner
}

// Resume is the resume block of a version 3 ACQUIRE: what the client kept
// of the claim it continues. It prints its credential redacted.
type Resume struct {
	// ID is the claim's token (FlagHeld) or its ticket; never 0.
	ID uint64
	// Generation is the generation of Credential; never 0.
	Generation uint32
	// Attempt is this resume's number, higher than every earlier resume
	// of the claim; never 0. It is not under the credential.
	Attempt    uint16
	Credential Credential
}

// NoWait reports whether the NOWAIT flag is set.
func (a Acquire) NoWait() bool { return a.Flags&FlagNoWait != 0 }

// Shared reports whether this is a shared claim (version 2 or 3, SHARED set).
func (a Acquire) Shared() bool {
	return (a.Version == Version2 || a.Version == Version3) && a.Flags&FlagShared != 0
}

// Resuming reports whether this ACQUIRE continues a claim (version 3,
// RESUME set).
func (a Acquire) Resuming() bool { return a.Version == Version3 && a.Flags&FlagResume != 0 }

// Held reports whether the claim it continues holds the name (RESUME and
// HELD set): Resume.ID is then a token, else a ticket.
func (a Acquire) Held() bool { return a.Resuming() && a.Flags&FlagHeld != 0 }

// fixedSize is the size of the payload before the name: 7 in version 1, 9
// in versions 2 and 3, and 39 for a version 3 resume.
func (a Acquire) fixedSize() int {
	switch {
	case a.Resuming():
		return acquireFixedResume
	case a.Version == Version1:
		return acquireFixed
	}
	return acquireFixedV2
}

// AppendAcquire appends an ACQUIRE frame to dst after checking every field as
// the server would, so a client learns of its mistake before dialling.
func AppendAcquire(dst []byte, a Acquire) ([]byte, error) {
	if err := a.check(); err != nil {
		return dst, err
	}
	n := a.fixedSize() + len(a.Name) + len(a.Owner)
	dst = append(dst, byte(TypeAcquire), byte(n>>8), byte(n), a.Version, a.Flags)
	dst = binary.BigEndian.AppendUint32(dst, a.LeaseMs)
	if a.Version != Version1 {
		dst = binary.BigEndian.AppendUint16(dst, a.Limit)
	}
	if a.Resuming() {
		dst = binary.BigEndian.AppendUint64(dst, a.Resume.ID)
		dst = binary.BigEndian.AppendUint32(dst, a.Resume.Generation)
		dst = binary.BigEndian.AppendUint16(dst, a.Resume.Attempt)
		dst = append(dst, a.Resume.Credential[:]...)
	}
	dst = append(dst, byte(len(a.Name)))
	dst = append(dst, a.Name...)
	return append(dst, a.Owner...), nil
}

// DecodeAcquire parses and checks an ACQUIRE payload of version 1 or 2:
// what a server that does not speak version 3 accepts. The error is an
// *Error: VERSION for any other version, PROTOCOL when the payload is cut
// short, BAD_REQUEST for unknown flags, a zero lease, a bad limit, or a bad
// name or owner.
//
// The version is checked first, as soon as its byte is there, so that a
// client of another version learns that rather than of a layout it did not use.
func DecodeAcquire(p []byte) (Acquire, error) { return DecodeAcquireUpTo(p, Version2) }

// DecodeAcquireUpTo parses and checks an ACQUIRE payload of any version
// from 1 to newest (Version2 or Version3), in the order of
// docs/protocol.md: the version, the length rules (for version 3, the
// fixed part that the RESUME bit alone decides), then the fields. Errors
// are those of DecodeAcquire, and BAD_REQUEST for a resume block with a
// zero id, generation or attempt, HELD without RESUME, or NOWAIT with
// RESUME.
func DecodeAcquireUpTo(p []byte, newest uint8) (Acquire, error) {
	if len(p) == 0 {
		return Acquire{}, errorf(CodeProtocol, "empty ACQUIRE payload")
	}
	newest = min(newest, Version3)
	v := p[0]
	if v < Version1 || v > newest {
		return Acquire{}, versionError(v, newest)
	}
	fixed := acquireFixed
	if v != Version1 {
		fixed = acquireFixedV2
	}
	if len(p) < fixed {
		return Acquire{}, errorf(CodeProtocol, "version %d ACQUIRE payload of %d bytes is shorter than %d", v, len(p), fixed)
	}
	resume := v == Version3 && p[1]&FlagResume != 0
	if resume {
		fixed = acquireFixedResume
		if len(p) < fixed {
			return Acquire{}, errorf(CodeProtocol, "version 3 ACQUIRE with RESUME: payload of %d bytes is shorter than %d", len(p), fixed)
		}
	}
	nameLen := int(p[fixed-1])
	if len(p) < fixed+nameLen {
		return Acquire{}, errorf(CodeProtocol, "version %d ACQUIRE payload of %d bytes is shorter than %d + name_len %d", v, len(p), fixed, nameLen)
	}
	a := Acquire{
		Version: v,
		Flags:   p[1],
		LeaseMs: binary.BigEndian.Uint32(p[2:6]),
		Name:    string(p[fixed : fixed+nameLen]),
		Owner:   string(p[fixed+nameLen:]),
	}
	if v != Version1 {
		a.Limit = binary.BigEndian.Uint16(p[6:8])
	}
	if resume {
		a.Resume.ID = binary.BigEndian.Uint64(p[8:16])
		a.Resume.Generation = binary.BigEndian.Uint32(p[16:20])
		a.Resume.Attempt = binary.BigEndian.Uint16(p[20:22])
		copy(a.Resume.Credential[:], p[22:acquireFixedResume-1])
	}
	if err := a.check(); err != nil {
		return Acquire{}, err
	}
	return a, nil
}

func versionError(v, newest uint8) *Error {
	if newest == Version2 {
		return errorf(CodeVersion, "protocol version %d is not supported, want %d or %d", v, Version1, Version2)
	}
	return errorf(CodeVersion, "protocol version %d is not supported, want %d to %d", v, Version1, newest)
}

func (a Acquire) check() error {
	known := FlagNoWait
	switch a.Version {
	case Version1:
		if a.Limit != 0 {
			return errorf(CodeBadRequest, "limit %d in a version 1 ACQUIRE, which has no limit (use version 2)", a.Limit)
		}
	case Version2:
		known |= FlagShared
	case Version3:
		known |= FlagShared | FlagResume | FlagHeld
	default:
		return versionError(a.Version, Version3)
	}
	if a.Flags&^known != 0 {
		return errorf(CodeBadRequest, "unknown ACQUIRE flags 0x%02x", a.Flags&^known)
	}
	resume := a.Flags&FlagResume != 0
	switch {
	case a.Flags&FlagHeld != 0 && !resume:
		return errorf(CodeBadRequest, "HELD without RESUME: only a resume holds before it is answered")
	case resume && a.Flags&FlagNoWait != 0:
		return errorf(CodeBadRequest, "NOWAIT with RESUME: a resume continues a claim, it never tries for one")
	case !resume && a.Resume != (Resume{}):
		return errorf(CodeBadRequest, "a resume block without the RESUME flag")
	}
	if a.LeaseMs == 0 {
		return errorf(CodeBadRequest, "lease 0ms must be at least 1ms")
	}
	if a.Version != Version1 {
		switch {
		case a.Limit == 0:
			return errorf(CodeBadRequest, "limit 0 must be at least 1")
		case a.Limit > 1 && a.Flags&FlagShared == 0:
			return errorf(CodeBadRequest, "limit %d without SHARED: an exclusive claim's limit must be 1", a.Limit)
		}
	}
	if resume {
		switch {
		case a.Resume.ID == 0:
			return errorf(CodeBadRequest, "resume of id 0: a token or a ticket is never 0")
		case a.Resume.Generation == 0:
			return errorf(CodeBadRequest, "resume of generation 0: generations start at 1")
		case a.Resume.Attempt == 0:
			return errorf(CodeBadRequest, "resume attempt 0: attempts start at 1")
		}
	}
	if err := CheckName(a.Name); err != nil {
		return err
	}
	return CheckOwner(a.Owner)
}

// CheckName reports whether s is a valid lock name: 1 to 255 bytes of valid
// UTF-8 without control characters (bytes below 0x20, and 0x7F).
func CheckName(s string) error {
	if len(s) == 0 {
		return errorf(CodeBadRequest, "lock name is empty")
	}
	if len(s) > MaxName {
		return errorf(CodeBadRequest, "lock name of %d bytes exceeds %d", len(s), MaxName)
	}
	if err := checkText(s); err != nil {
		return errorf(CodeBadRequest, "lock name %q: %s", s, err)
	}
	return nil
}

// CheckOwner reports whether s is a valid owner text: 0 to 255 bytes of valid
// UTF-8 without control characters.
func CheckOwner(s string) error {
	if len(s) > MaxOwner {
		return errorf(CodeBadRequest, "owner text of %d bytes exceeds %d", len(s), MaxOwner)
	}
	if err := checkText(s); err != nil {
		return errorf(CodeBadRequest, "owner %q: %s", s, err)
	}
	return nil
}

type textError string

func (e textError) Error() string { return string(e) }

func checkText(s string) error {
	if !utf8.ValidString(s) {
		return textError("not valid UTF-8")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7F {
			return textError(fmt.Sprintf("control byte 0x%02x at offset %d", c, i))
		}
	}
	return nil
}

// AppendHeartbeat appends a HEARTBEAT frame to dst.
func AppendHeartbeat(dst []byte) []byte {
	return append(dst, byte(TypeHeartbeat), 0, 0)
}

// CheckHeartbeat checks a HEARTBEAT payload: it must be empty.
func CheckHeartbeat(p []byte) error {
	if len(p) != 0 {
		return errorf(CodeProtocol, "HEARTBEAT payload must be empty, got %d bytes", len(p))
	}
	return nil
}

// waitingSize and acquiredSize are the payload sizes of WAITING and ACQUIRED.
const (
	waitingSize  = 5
	acquiredSize = 9
)

// AppendWaiting appends a WAITING frame with the waiter's position
// (1 = next to be promoted) to dst.
func AppendWaiting(dst []byte, position uint32) []byte {
	dst = append(dst, byte(TypeWaiting), 0, waitingSize, 0)
	return binary.BigEndian.AppendUint32(dst, position)
}

// DecodeWaiting parses a WAITING payload and returns the position.
func DecodeWaiting(p []byte) (position uint32, err error) {
	if len(p) != waitingSize {
		return 0, errorf(CodeProtocol, "WAITING payload of %d bytes, want %d", len(p), waitingSize)
	}
	return binary.BigEndian.Uint32(p[1:]), nil
}

// AppendAcquired appends an ACQUIRED frame to dst: a reply when push is
// false, the promotion push when it is true.
func AppendAcquired(dst []byte, push bool, token uint64) []byte {
	var flags byte
	if push {
		flags = FlagPush
	}
	dst = append(dst, byte(TypeAcquired), 0, acquiredSize, flags)
	return binary.BigEndian.AppendUint64(dst, token)
}

// DecodeAcquired parses an ACQUIRED payload. A token of 0 is refused: the
// protocol never grants it.
func DecodeAcquired(p []byte) (push bool, token uint64, err error) {
	if len(p) != acquiredSize {
		return false, 0, errorf(CodeProtocol, "ACQUIRED payload of %d bytes, want %d", len(p), acquiredSize)
	}
	token = binary.BigEndian.Uint64(p[1:])
	if token == 0 {
		return false, 0, errorf(CodeProtocol, "ACQUIRED with token 0")
	}
	return p[0]&FlagPush != 0, token, nil
}

// AppendError appends an ERROR frame to dst. A message longer than
// MaxErrorMessage is cut at a rune boundary; invalid UTF-8 is replaced.
func AppendError(dst []byte, code Code, msg string) []byte {
	if !utf8.ValidString(msg) {
		msg = toValidUTF8(msg)
	}
	if len(msg) > MaxErrorMessage {
		cut := MaxErrorMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	n := 1 + len(msg)
	dst = append(dst, byte(TypeError), byte(n>>8), byte(n), byte(code))
	return append(dst, msg...)
}

func toValidUTF8(s string) string {
	b := make([]byte, 0, len(s))
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			b = append(b, '?')
		} else {
			b = append(b, s[:size]...)
		}
		s = s[size:]
	}
	return string(b)
}

// DecodeError parses an ERROR payload into an *Error. A message that is not
// valid UTF-8 is kept with its bad bytes replaced: it is for humans only.
func DecodeError(p []byte) (*Error, error) {
	if len(p) < 1 || len(p) > 1+MaxErrorMessage {
		return nil, errorf(CodeProtocol, "ERROR payload of %d bytes, want 1 .. %d", len(p), 1+MaxErrorMessage)
	}
	msg := string(p[1:])
	if !utf8.ValidString(msg) {
		msg = toValidUTF8(msg)
	}
	return &Error{Code: Code(p[0]), Msg: msg}, nil
}
