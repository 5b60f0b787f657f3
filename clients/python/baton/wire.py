"""The bytes of Baton's wire protocol, versions 1, 2 and 3 (docs/protocol.md)."""

from __future__ import annotations

import hmac
import struct
from typing import List, Optional, Tuple

from .errors import BadRequest, ProtocolError

VERSION = 1  # what an exclusive claim sends without version 3: every server speaks it
VERSION_2 = 2  # what a shared claim sends without version 3: the SHARED flag and a limit
VERSION_3 = 3  # claims that can move to the next server: credentials, tickets, resumes
HEADER_SIZE = 3
MAX_PAYLOAD = 1024

T_ACQUIRE = 0x01
T_HEARTBEAT = 0x02
T_ERROR = 0x80
T_WAITING = 0x81
T_ACQUIRED = 0x82

FLAG_NOWAIT = 0x01
FLAG_SHARED = 0x02
FLAG_RESUME = 0x04  # ACQUIRE v3: the frame continues a claim; the resume block follows limit
FLAG_HELD = 0x08  # ACQUIRE v3 with RESUME: the claim holds (its id is a token, else a ticket)
FLAG_PUSH = 0x01  # ACQUIRED: a promotion, not a reply
FLAG_CREDENTIAL = 0x02  # ACQUIRED in a v3 session: generation and credential follow the token
FLAG_TICKET = 0x01  # WAITING in a v3 session: ticket, generation and credential follow the position

CREDENTIAL_SIZE = 16
MAX_ATTEMPT = 0xFFFF
MAX_GENERATION = 0xFFFFFFFF
MAX_ID = 0xFFFFFFFFFFFFFFFF

MAX_LEASE_MS = 0xFFFFFFFF
MAX_LIMIT = 0xFFFF

HEARTBEAT = bytes([T_HEARTBEAT, 0, 0])


def _check_text(what: str, raw: bytes, lo: int) -> None:
    if not lo <= len(raw) <= 255:
        if lo and not raw:
            raise BadRequest(f"{what} is empty")
        raise BadRequest(f"{what} is {len(raw)} bytes, more than 255")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{what} is not valid UTF-8") from None
    for b in raw:
        if b < 0x20 or b == 0x7F:
            raise BadRequest(f"{what} holds the control byte 0x{b:02x}")


def check_name(name: "str | bytes") -> bytes:
    """The lock name as bytes, or BadRequest: 1..255 bytes of UTF-8 without
    control bytes (below 0x20, and 0x7F)."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else bytes(name)
    _check_text("lock name", raw, 1)
    return raw


def check_owner(owner: "str | bytes") -> bytes:
    """The owner text as bytes, or BadRequest: 0..255 bytes of UTF-8 without
    control bytes."""
    raw = owner.encode("utf-8", "surrogateescape") if isinstance(owner, str) else bytes(owner)
    _check_text("owner", raw, 0)
    return raw


def lease_ms(lease: float) -> int:
    """A lease in seconds as whole milliseconds, or BadRequest."""
    if isinstance(lease, bool) or not isinstance(lease, (int, float)):
        raise BadRequest(f"lease {lease!r} is not a number of seconds")
    ms = int(lease * 1000)
    if ms < 1:
        raise BadRequest(f"lease {lease}s must be at least 1ms")
    if ms > MAX_LEASE_MS:
        raise BadRequest(f"lease {lease}s exceeds the protocol's maximum of {MAX_LEASE_MS}ms")
    return ms


def check_limit(limit: object) -> int:
    """A shared claim's limit, or BadRequest: a whole number 1..65535."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise BadRequest(f"limit {limit!r} is not a whole number")
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit {limit} must be from 1 to {MAX_LIMIT}")
    return limit


def encode_acquire(name: "str | bytes", lease_millis: int, owner: "str | bytes" = "", nowait: bool = False, *,
                   shared: bool = False, limit: Optional[int] = None) -> bytes:
    """An ACQUIRE frame, after the checks the server would make. Without a
    limit it is version 1 (an exclusive claim); with one, version 2, whose
    ``shared`` flag makes the claim shared (an exclusive claim's limit must
    be 1)."""
    n = check_name(name)
    o = check_owner(owner)
    if not 1 <= lease_millis <= MAX_LEASE_MS:
        raise BadRequest(f"lease {lease_millis}ms must be 1..{MAX_LEASE_MS}")
    flags = FLAG_NOWAIT if nowait else 0
    if limit is None:
        if shared:
            raise BadRequest("a shared claim needs a limit")
        payload = struct.pack(">BBIB", VERSION, flags, lease_millis, len(n)) + n + o
    else:
        check_limit(limit)
        if shared:
            flags |= FLAG_SHARED
        elif limit != 1:
            raise BadRequest(f"limit {limit} without SHARED: an exclusive claim's limit must be 1")
        payload = struct.pack(">BBIHB", VERSION_2, flags, lease_millis, limit, len(n)) + n + o
    return struct.pack(">BH", T_ACQUIRE, len(payload)) + payload


class Credential:
    """A claim's credential (version 3): 16 bytes the server computed with
    its key, which let a connection take the claim over. Its repr and str
    are redacted, so that no log line, exception or printed object shows
    it; ``raw`` is for the wire alone. Two are equal when their bytes are
    (compared in constant time)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes) -> None:
        if len(raw) != CREDENTIAL_SIZE:
            raise BadRequest(f"a credential is {CREDENTIAL_SIZE} bytes, not {len(raw)}")
        self._raw = bytes(raw)

    @property
    def raw(self) -> bytes:
        return self._raw

    def __repr__(self) -> str:
        return "Credential(redacted)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Credential) and hmac.compare_digest(self._raw, other._raw)

    def __hash__(self) -> int:
        return hash(self._raw)

    def __reduce__(self) -> Tuple[object, ...]:
        raise TypeError("a credential is not pickled: it belongs on the wire of its claim only")


class Resume:
    """The resume block of a version 3 ACQUIRE: which claim the frame
    continues (its token if ``held``, else its ticket), the generation of
    its credential, and this attempt's number (1..65535, rising with each
    resume of the claim)."""

    __slots__ = ("held", "id", "generation", "attempt", "credential")

    def __init__(self, held: bool, id: int, generation: int, attempt: int, credential: Credential) -> None:
        self.held = held
        self.id = id
        self.generation = generation
        self.attempt = attempt
        self.credential = credential

    def __repr__(self) -> str:
        return (f"Resume(held={self.held}, id={self.id}, generation={self.generation}, "
                f"attempt={self.attempt}, credential=redacted)")


def encode_acquire_v3(name: "str | bytes", lease_millis: int, owner: "str | bytes" = "", nowait: bool = False, *,
                      shared: bool = False, limit: int = 1, resume: Optional[Resume] = None) -> bytes:
    """A version 3 ACQUIRE, after the checks the server would make: the
    layout of version 2 with version 3 for a new claim, or, with
    ``resume``, the claim it continues (RESUME, HELD for a holder, and the
    30-byte resume block between limit and name_len)."""
    n = check_name(name)
    o = check_owner(owner)
    if not 1 <= lease_millis <= MAX_LEASE_MS:
        raise BadRequest(f"lease {lease_millis}ms must be 1..{MAX_LEASE_MS}")
    check_limit(limit)
    if not shared and limit != 1:
        raise BadRequest(f"limit {limit} without SHARED: an exclusive claim's limit must be 1")
    flags = (FLAG_NOWAIT if nowait else 0) | (FLAG_SHARED if shared else 0)
    block = b""
    if resume is not None:
        if nowait:
            raise BadRequest("a resume cannot be NOWAIT: it continues a claim")
        if not 1 <= resume.id <= MAX_ID:
            raise BadRequest(f"a resume's {'token' if resume.held else 'ticket'} {resume.id} must be 1..{MAX_ID}")
        if not 1 <= resume.generation <= MAX_GENERATION:
            raise BadRequest(f"a resume's generation {resume.generation} must be 1..{MAX_GENERATION}")
        if not 1 <= resume.attempt <= MAX_ATTEMPT:
            raise BadRequest(f"a resume's attempt {resume.attempt} must be 1..{MAX_ATTEMPT}")
        flags |= FLAG_RESUME | (FLAG_HELD if resume.held else 0)
        block = struct.pack(">QIH", resume.id, resume.generation, resume.attempt) + resume.credential.raw
    payload = struct.pack(">BBIH", VERSION_3, flags, lease_millis, limit) + block + bytes([len(n)]) + n + o
    return struct.pack(">BH", T_ACQUIRE, len(payload)) + payload


def encode_frame(ftype: int, payload: bytes) -> bytes:
    """Any frame: type, u16 length, payload."""
    return struct.pack(">BH", ftype, len(payload)) + payload


class Frame:
    """One frame from the server, decoded. In a version 3 session an
    ACQUIRED or WAITING frame may carry a credential (``credential`` not
    None), with its ``generation`` and, for a WAITING, the ``ticket``."""

    __slots__ = ("type", "position", "push", "token", "code", "message", "ticket", "generation", "credential")

    def __init__(self, ftype: int) -> None:
        self.type = ftype
        self.position = 0
        self.push = False
        self.token = 0
        self.code = 0
        self.message = ""
        self.ticket = 0
        self.generation = 0
        self.credential: Optional[Credential] = None

    def __repr__(self) -> str:
        return (f"Frame(type=0x{self.type:02x}, position={self.position}, push={self.push}, token={self.token}, "
                f"code=0x{self.code:02x}, ticket={self.ticket}, generation={self.generation}, "
                f"credential={'redacted' if self.credential is not None else None})")


def decode(ftype: int, p: bytes, v3: bool = False) -> Frame:
    """Decodes a server frame's payload, or raises ProtocolError. In a
    session that began with a version 3 ACQUIRE (``v3``), ACQUIRED is 9
    bytes, or 29 with CREDENTIAL, and WAITING 5, or 33 with TICKET; the
    flag and the size must agree, and a generation or ticket is never 0."""
    f = Frame(ftype)
    if ftype == T_WAITING:
        with_ticket = v3 and len(p) == 33
        if len(p) != 5 and not with_ticket:
            raise ProtocolError(f"WAITING payload of {len(p)} bytes, want {'5 or 33' if v3 else '5'}")
        if v3 and bool(p[0] & FLAG_TICKET) != with_ticket:
            raise ProtocolError(f"WAITING payload of {len(p)} bytes with flags 0x{p[0]:02x}: "
                                "TICKET and 33 bytes go together")
        f.position = struct.unpack(">I", p[1:5])[0]
        if with_ticket:
            f.ticket, f.generation = struct.unpack(">QI", p[5:17])
            if f.ticket == 0:
                raise ProtocolError("WAITING with ticket 0")
            if f.generation == 0:
                raise ProtocolError("WAITING with a credential of generation 0")
            f.credential = Credential(p[17:33])
    elif ftype == T_ACQUIRED:
        with_cred = v3 and len(p) == 29
        if len(p) != 9 and not with_cred:
            raise ProtocolError(f"ACQUIRED payload of {len(p)} bytes, want {'9 or 29' if v3 else '9'}")
        if v3 and bool(p[0] & FLAG_CREDENTIAL) != with_cred:
            raise ProtocolError(f"ACQUIRED payload of {len(p)} bytes with flags 0x{p[0]:02x}: "
                                "CREDENTIAL and 29 bytes go together")
        f.push = bool(p[0] & FLAG_PUSH)
        f.token = struct.unpack(">Q", p[1:9])[0]
        if f.token == 0:
            raise ProtocolError("ACQUIRED with token 0")
        if with_cred:
            f.generation = struct.unpack(">I", p[9:13])[0]
            if f.generation == 0:
                raise ProtocolError("ACQUIRED with a credential of generation 0")
            f.credential = Credential(p[13:29])
    elif ftype == T_ERROR:
        if not 1 <= len(p) <= 513:
            raise ProtocolError(f"ERROR payload of {len(p)} bytes, want 1..513")
        f.code = p[0]
        f.message = p[1:].decode("utf-8", "replace")
    else:
        raise ProtocolError(f"unexpected frame type 0x{ftype:02x}")
    return f


def split(buf: bytearray) -> Tuple[List[Tuple[int, bytes]], Optional[str]]:
    """Takes every whole frame off the front of buf: (frames, error). A header
    with a length over MAX_PAYLOAD is an error at once, its payload unread."""
    frames: List[Tuple[int, bytes]] = []
    while len(buf) >= HEADER_SIZE:
        ftype = buf[0]
        length = (buf[1] << 8) | buf[2]
        if length > MAX_PAYLOAD:
            return frames, f"frame length {length} exceeds the limit of {MAX_PAYLOAD}"
        end = HEADER_SIZE + length
        if len(buf) < end:
            break
        frames.append((ftype, bytes(buf[HEADER_SIZE:end])))
        del buf[:end]
    return frames, None
