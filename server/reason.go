package server

import "github.com/batonlock/baton/clients/go/wire"

// EndReason says why a session ended. It is mapped once, here, to the wire
// code the client is told, the log field and the metric label.
type EndReason uint8

// End reasons.
const (
	// ReasonClosed: the client closed the connection (the release).
	ReasonClosed EndReason = iota + 1
	// ReasonReset: the connection failed (RST, broken pipe...).
	ReasonReset
	// ReasonLeaseExpired: silent for its full lease.
	ReasonLeaseExpired
	// ReasonForceReleased: an operator took the lock away.
	ReasonForceReleased
	// ReasonKicked: an operator removed the waiter from the queue.
	ReasonKicked
	// ReasonBusy: NOWAIT on a held lock.
	ReasonBusy
	// ReasonWriteTimeout: a write did not complete within io-timeout.
	ReasonWriteTimeout
	// ReasonReadTimeout: the first frame, or the rest of a started frame,
	// did not arrive within io-timeout.
	ReasonReadTimeout
	// ReasonProtocolError: a malformed, oversize, unknown or misplaced frame.
	ReasonProtocolError
	// ReasonBadRequest: a bad name, lease, flag or owner.
	ReasonBadRequest
	// ReasonVersion: an unsupported protocol version.
	ReasonVersion
	// ReasonOverloaded: a server limit refused the session.
	ReasonOverloaded
	// ReasonShutdown: the server is shutting down.
	ReasonShutdown
	// ReasonUnauthorized: not allowed.
	ReasonUnauthorized
	// ReasonTLSHandshake: the TLS handshake failed or did not complete
	// within io-timeout (no ERROR: there is no channel to send it on).
	ReasonTLSHandshake
	// ReasonNotLeader: this node of a replicated cluster does not lead (or
	// just stopped leading); the message names the leader if known.
	ReasonNotLeader
	// ReasonLimitMismatch: a shared claim's limit differs from the one in
	// force for the name (protocol version 2); the message is that limit.
	ReasonLimitMismatch
	// ReasonMoved: the claim of this connection went on on another one
	// (protocol version 3): its end released nothing. Also a resume whose
	// attempt number is not above the claim's.
	ReasonMoved
	// ReasonSuperseded: after a crash, resumed claims of one name could not
	// all hold, and this one had the lower token.
	ReasonSuperseded
	// ReasonResumeRefused: the claim a resume names cannot go on here.
	ReasonResumeRefused
	// ReasonBadCredential: a resume's credential is not the one this server
	// computes for the claim it names.
	ReasonBadCredential
)

var reasonNames = [...]string{
	ReasonClosed:        "closed",
	ReasonReset:         "reset",
	ReasonLeaseExpired:  "lease_expired",
	ReasonForceReleased: "force_released",
	ReasonKicked:        "kicked",
	ReasonBusy:          "busy",
	ReasonWriteTimeout:  "write_timeout",
	ReasonReadTimeout:   "read_timeout",
	ReasonProtocolError: "protocol_error",
	ReasonBadRequest:    "bad_request",
	ReasonVersion:       "version",
	ReasonOverloaded:    "overloaded",
	ReasonShutdown:      "shutdown",
	ReasonUnauthorized:  "unauthorized",
	ReasonTLSHandshake:  "tls_handshake",
	ReasonNotLeader:     "not_leader",
	ReasonLimitMismatch: "limit_mismatch",
	ReasonMoved:         "moved",
	ReasonSuperseded:    "superseded",
	ReasonResumeRefused: "resume_refused",
	ReasonBadCredential: "bad_credential",
}

func (r EndReason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return "unknown"
}

// code is the ERROR code the client is sent, or 0 when it gets none: it
// left by itself, or its socket cannot take a write.
func (r EndReason) code() wire.Code {
	switch r {
	case ReasonLeaseExpired:
		return wire.CodeLeaseExpired
	case ReasonForceReleased:
		return wire.CodeForceReleased
	case ReasonKicked:
		return wire.CodeKicked
	case ReasonBusy:
		return wire.CodeBusy
	case ReasonReadTimeout, ReasonProtocolError:
		return wire.CodeProtocol
	case ReasonBadRequest:
		return wire.CodeBadRequest
	case ReasonVersion:
		return wire.CodeVersion
	case ReasonOverloaded:
		return wire.CodeOverloaded
	case ReasonShutdown:
		return wire.CodeShutdown
	case ReasonUnauthorized:
		return wire.CodeUnauthorized
	case ReasonNotLeader:
		return wire.CodeNotLeader
	case ReasonLimitMismatch:
		return wire.CodeLimitMismatch
	case ReasonMoved:
		return wire.CodeMoved
	case ReasonSuperseded:
		return wire.CodeSuperseded
	case ReasonResumeRefused:
		return wire.CodeResumeRefused
	case ReasonBadCredential:
		return wire.CodeBadCredential
	}
	return 0
}

// broken reports whether a session that ends for r ended for a broken
// connection: a read that timed out, a frame that breaks the protocol, a
// write that timed out. A holder of version 3 with a credential so ended
// keeps its slot until its lease runs out (protocol.md, section 14): its
// client may not have learnt of the end.
func (r EndReason) broken() bool {
	return r == ReasonReadTimeout || r == ReasonProtocolError || r == ReasonWriteTimeout
}

// promotes reports whether a session that ends for r can make room for a
// waiter, and so be a handover's cause: it was in the table (a holder, or
// the head of a queue) and the server serves on. The other reasons refuse
// a session before it enters the table, or end every session at once
// with nobody promoted (shutdown, a lost term: see promoteLocked).
func (r EndReason) promotes() bool {
	switch r {
	case ReasonClosed, ReasonReset, ReasonLeaseExpired, ReasonForceReleased, ReasonKicked,
		ReasonWriteTimeout, ReasonReadTimeout, ReasonProtocolError:
		return true
	}
	return false
}

// reasonFor maps a wire error code found while decoding to an end reason.
func reasonFor(c wire.Code) EndReason {
	switch c {
	case wire.CodeBadRequest:
		return ReasonBadRequest
	case wire.CodeVersion:
		return ReasonVersion
	case wire.CodeUnauthorized:
		return ReasonUnauthorized
	}
	return ReasonProtocolError
}

var allReasons = func() []EndReason {
	var rs []EndReason
	for r := range reasonNames {
		if r != 0 {
			rs = append(rs, EndReason(r))
		}
	}
	return rs
}()
