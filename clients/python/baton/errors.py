"""Baton's exceptions: one root, loss, and one class per wire error code."""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "Error",
    "LockLost",
    "AlreadyHeld",
    "MaxHoldReached",
    "Unconfirmed",
    "ConnectionBroken",
    "InsecureTLS",
    "ServerError",
    "Shutdown",
    "Overloaded",
    "NotLeader",
    "LeaseExpired",
    "ForceReleased",
    "Kicked",
    "Busy",
    "ProtocolError",
    "BadRequest",
    "VersionError",
    "Unauthorized",
    "LimitMismatch",
    "ResumeRefused",
    "Superseded",
    "Moved",
    "BadCredential",
    "TLSError",
    "TLSRefused",
    "is_retryable",
    "StaleToken",
    "SharedClaim",
    "error_for_code",
]


class Error(Exception):
    """The root of every error this package raises (except TimeoutError)."""


class LockLost(Error):
    """Ownership ended while the lock was held, for a reason other than release.

    ``cause`` is the error that ended it (``Unconfirmed``, ``ForceReleased``,
    ``LeaseExpired``, ``Shutdown``, ``NotLeader``, ``ConnectionBroken``,
    ``MaxHoldReached``; in a move of protocol version 3, ``ResumeRefused``,
    ``Superseded``, ``Moved``, ``BadCredential``...).
    The work the lock guarded must stop.
    """

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"lock {name!r} lost: {cause}")
        self.name = name
        self.cause = cause


class StaleToken(Error):
    """The guarded resource has seen a higher fencing token for the lock
    (``baton.fence``): this holder lost the lock, nothing was written, and
    the work must stop. ``lock`` and ``token`` say which; ``__cause__`` is
    the resource's own error, when it raised one."""

    def __init__(self, lock: str, token: int, message: str) -> None:
        super().__init__(f"fence: lock {lock!r}: {message}")
        self.lock = lock
        self.token = token


class SharedClaim(Error, ValueError):
    """A shared claim with a limit above 1 given to a ``baton.fence`` kit:
    its holders' tokens are all current, and a mark per name would refuse
    the live ones granted earlier. Fence per record instead
    (docs/fencing.md)."""


class AlreadyHeld(Error):
    """The same Client already holds or waits for this name. Locks are not
    re-entrant: a second claim would queue behind its own caller and, if the
    caller waits for it, never be granted. Refused at once, without
    connecting, unless ``queue_behind_self=True`` asks for exactly that. A
    ``nowait=True`` claim is not refused: it cannot wait, and the server
    answers Busy."""


class InsecureTLS(Error, ValueError):
    """The ``ssl_context`` given to a Client would not verify the server: its
    ``verify_mode`` is ``CERT_NONE`` (a bare ``ssl.SSLContext()`` is one),
    or its ``check_hostname`` is False. Any server, or anyone on the path,
    could then answer as the lock server. Raised when the Client is made,
    unless ``insecure_tls=True`` says that this is meant. Build the context
    with ``ssl.create_default_context(cafile=...)`` instead."""


class MaxHoldReached(Error):
    """The claim ended itself after the ``max_hold`` the caller set: the
    client closed the connection (the server hands the lock on at once),
    and the work must stop as after any other loss."""


class Unconfirmed(Error):
    """The server confirmed nothing for 0.8 x lease (from the send of the last
    request it answered), so the client ended the session itself: from a
    full lease on, the server may give the lock to another."""


class ConnectionBroken(Error):
    """The connection to the server failed (reset, closed, unreadable), or
    could not be made (refused, unreachable)."""


class TLSError(Error):
    """The TLS handshake with a server failed: its certificate is not one
    this client trusts (another CA, another name, expired), or the server
    refused this client's (then also Unauthorized: TLSRefused). A
    configuration to fix, never a server that is down: never retried, not
    waited out by ``wait_for_server``, and never a ConnectionBroken, which
    a refused connection is."""


class ServerError(Error):
    """An ERROR frame from the server. ``code`` is its wire code, ``message``
    the server's text. Subclasses name each known code."""

    code: int = 0

    def __init__(self, message: str = "", code: Optional[int] = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        name = _NAMES.get(self.code, f"0x{self.code:02x}")
        super().__init__(f"{name}: {message}" if message else name)

    @property
    def server_condition(self) -> bool:
        """True for codes 0x01-0x0F: the server's state, not the client's fault."""
        return 0x01 <= self.code <= 0x0F

    @property
    def client_error(self) -> bool:
        """True for codes 0x20-0x2F: a bug or misconfiguration; never retried."""
        return 0x20 <= self.code <= 0x2F


class Shutdown(ServerError):
    """SHUTDOWN (0x01): the server is going away."""

    code = 0x01


class Overloaded(ServerError):
    """OVERLOADED (0x02): a server limit refused the session."""

    code = 0x02


class NotLeader(ServerError):
    """NOT_LEADER (0x03): this node is not the cluster's leader. ``message`` is
    the leader's client address, or empty while none is known."""

    code = 0x03


class LeaseExpired(ServerError):
    """LEASE_EXPIRED (0x10): the server heard nothing for a whole lease."""

    code = 0x10


class ForceReleased(ServerError):
    """FORCE_RELEASED (0x11): an operator took the lock away."""

    code = 0x11


class Kicked(ServerError):
    """KICKED (0x12): an operator removed this waiter from the queue."""

    code = 0x12


class Busy(ServerError):
    """BUSY (0x13): nowait was asked for and the claim may not hold at once
    (the lock is held, every slot is taken, or others wait first)."""

    code = 0x13


class ProtocolError(ServerError):
    """PROTOCOL (0x20): the server saw a malformed frame."""

    code = 0x20


class BadRequest(ServerError):
    """BAD_REQUEST (0x21): a bad name, lease or owner (also raised before
    dialling, for inputs the client can check itself)."""

    code = 0x21


class VersionError(ServerError):
    """VERSION (0x22): the server does not speak the claim's protocol version:
    version 1, or version 2 for a shared claim (a server older than shared
    claims refuses those). A server that does not speak version 3 is sent
    version 1 or 2 instead, by the client itself: this error never comes
    of version 3."""

    code = 0x22


class Unauthorized(ServerError):
    """UNAUTHORIZED (0x23): the server refused this client."""

    code = 0x23


class LimitMismatch(ServerError):
    """LIMIT_MISMATCH (0x24): a shared claim's limit differs from the limit
    in force for the name, which its other shared sessions (holding or
    waiting) set. ``limit`` is that limit, from the server's message (None
    if the message was not a number); ``asked`` is this claim's. The
    claim's configuration disagrees with the name's other users: it is
    raised at once and never retried."""

    code = 0x24

    def __init__(self, message: str = "", asked: Optional[int] = None) -> None:
        super().__init__(message)
        self.limit: Optional[int] = int(message) if message.isascii() and message.isdigit() else None
        self.asked = asked

    def __str__(self) -> str:
        if self.limit is None:
            said = f"LIMIT_MISMATCH: {self.message}" if self.message else "LIMIT_MISMATCH"
            return said if self.asked is None else f"{said} (this claim's limit is {self.asked})"
        said = f"LIMIT_MISMATCH: the name's limit in force is {self.limit}"
        return said if self.asked is None else f"{said}, this claim's is {self.asked}"


class ResumeRefused(ServerError):
    """RESUME_REFUSED (0x14, protocol version 3): the server cannot continue
    a claim that the client carried to it (a move): the claim ended there
    (released, expired, taken away by an operator, ended by the server), it
    came back after the window for resumes, or its credential is too old.
    A holder's lock is lost (a new acquire is a new grant, with a new
    token); a waiter takes a new place at the end of the queue by itself.
    Retryable, as LeaseExpired is."""

    code = 0x14


class Superseded(ServerError):
    """SUPERSEDED (0x15, protocol version 3): after a crash of the server, a
    claim of the same name with a higher token that cannot hold beside this
    one came back too, and won. It means the claim had ended without the
    client being told (a TCP proxy that terminates connections between
    client and server, clocks that run at different rates, a credential in
    other hands): logged at ERROR; not retryable: look into it."""

    code = 0x15


class Moved(ServerError):
    """MOVED (0x16, protocol version 3): the server moved the claim to a
    connection that is not this client's own (MOVED on the claim's
    connection with no resume of this client open there): another
    connection used the claim's credential. Logged at ERROR; not
    retryable. (MOVED on a resume of this client's own is part of its move
    and never reaches the caller.)"""

    code = 0x16


class BadCredential(ServerError):
    """BAD_CREDENTIAL (0x25, protocol version 3): the server did not compute
    the credential a resume carried: the address list mixes servers of two
    clusters or data directories, the client certificate's key changed, or
    a bug. A client error: never retried."""

    code = 0x25


class TLSRefused(Unauthorized, TLSError):
    """The server refused this client in the TLS handshake: no client
    certificate, an expired one, or one of a CA it does not trust. Both
    Unauthorized and TLSError."""

    def __init__(self, message: str = "") -> None:
        Unauthorized.__init__(self, message)


def is_retryable(err: BaseException) -> bool:
    """Whether err, raised by an acquire (or the cause of a LockLost), is
    worth another try of the same call: a condition of the servers or of
    the network that may have passed, not a decision or a mistake that a
    new try would meet again (Go's ``baton.IsRetryable``).

    True for the server conditions (Shutdown, Overloaded, NotLeader),
    Unconfirmed, LeaseExpired and ResumeRefused (the confirmation, or the
    claim's move, did not get through in time), ConnectionBroken (a broken
    or refused connection: a wrong address looks the same, so bound the
    tries), and a TimeoutError whose wait saw no answer. False for an
    operator's decision (ForceReleased, Kicked), Busy (the caller asked not
    to wait), MaxHoldReached, a claim that ended unseen or whose credential
    another connection used (Superseded, Moved), client errors (BadRequest,
    Unauthorized, VersionError, ProtocolError, LimitMismatch,
    BadCredential, AlreadyHeld), TLSError, and anything that is not this
    package's. For a LockLost, its cause decides. The client never retries
    a held lock by itself: a new try is a new grant, with a new token.
    (Carrying a claim to the next server in a move, protocol version 3, is
    not a retry: the claim and its token stay the same, and the lock is
    not lost.)"""
    if isinstance(err, LockLost):
        err = err.cause
    if isinstance(err, TLSError):
        return False
    if isinstance(err, ServerError):
        return err.server_condition or err.code in (LeaseExpired.code, ResumeRefused.code)
    return isinstance(err, (Unconfirmed, ConnectionBroken))


_CLASSES: Dict[int, Type[ServerError]] = {
    c.code: c
    for c in (
        Shutdown,
        Overloaded,
        NotLeader,
        LeaseExpired,
        ForceReleased,
        Kicked,
        Busy,
        ProtocolError,
        BadRequest,
        VersionError,
        Unauthorized,
        LimitMismatch,
        ResumeRefused,
        Superseded,
        Moved,
        BadCredential,
    )
}

_NAMES = {
    0x01: "SHUTDOWN",
    0x02: "OVERLOADED",
    0x03: "NOT_LEADER",
    0x10: "LEASE_EXPIRED",
    0x11: "FORCE_RELEASED",
    0x12: "KICKED",
    0x13: "BUSY",
    0x14: "RESUME_REFUSED",
    0x15: "SUPERSEDED",
    0x16: "MOVED",
    0x20: "PROTOCOL",
    0x21: "BAD_REQUEST",
    0x22: "VERSION",
    0x23: "UNAUTHORIZED",
    0x24: "LIMIT_MISMATCH",
    0x25: "BAD_CREDENTIAL",
}


def code_name(code: int) -> str:
    """The spec's name of an error code, or ``0xNN`` for an unknown one."""
    return _NAMES.get(code, f"0x{code:02x}")


def error_for_code(code: int, message: str = "") -> ServerError:
    """The exception for an ERROR frame: its class if known, else ServerError."""
    cls = _CLASSES.get(code)
    if cls is None:
        return ServerError(message, code=code)
    return cls(message)
