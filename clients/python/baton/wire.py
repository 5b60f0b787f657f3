"""The bytes of Baton's wire protocol, versions 1 and 2 (docs/protocol.md)."""

from __future__ import annotations

import struct
from typing import List, Optional, Tuple

from .errors import BadRequest, ProtocolError

VERSION = 1  # what an exclusive claim sends: every server speaks it
VERSION_2 = 2  # what a shared claim sends: the SHARED flag and a limit
HEADER_SIZE = 3
MAX_PAYLOAD = 1024

T_ACQUIRE = 0x01
T_HEARTBEAT = 0x02
T_ERROR = 0x80
T_WAITING = 0x81
T_ACQUIRED = 0x82

FLAG_NOWAIT = 0x01
FLAG_SHARED = 0x02
FLAG_PUSH = 0x01

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


def encode_frame(ftype: int, payload: bytes) -> bytes:
    """Any frame: type, u16 length, payload."""
    return struct.pack(">BH", ftype, len(payload)) + payload


class Frame:
    """One frame from the server, decoded."""

    __slots__ = ("type", "position", "push", "token", "code", "message")

    def __init__(self, ftype: int) -> None:
        self.type = ftype
        self.position = 0
        self.push = False
        self.token = 0
        self.code = 0
        self.message = ""


def decode(ftype: int, p: bytes) -> Frame:
    """Decodes a server frame's payload, or raises ProtocolError."""
    f = Frame(ftype)
    if ftype == T_WAITING:
        if len(p) != 5:
            raise ProtocolError(f"WAITING payload of {len(p)} bytes, want 5")
        f.position = struct.unpack(">I", p[1:5])[0]
    elif ftype == T_ACQUIRED:
        if len(p) != 9:
            raise ProtocolError(f"ACQUIRED payload of {len(p)} bytes, want 9")
        f.push = bool(p[0] & FLAG_PUSH)
        f.token = struct.unpack(">Q", p[1:9])[0]
        if f.token == 0:
            raise ProtocolError("ACQUIRED with token 0")
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
