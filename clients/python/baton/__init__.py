"""Baton's Python client: named locks where the TCP connection is the claim.

    import baton

    client = baton.Client(["127.0.0.1:7070"], lease=10.0)
    with client.lock("jobs") as held:
        for step in steps:
            held.check()              # raises LockLost once the lock is lost
            step.run(fence=held.token)

Closing the connection is the release; the server pushes the lock to the
next waiter at once. Heartbeats keep the lock while the process lives; the
client counts the lock as lost once the server has confirmed nothing for
0.8 x lease, measured from the send of the last confirmed request, and
``held.check()`` reads that clock itself, so a process that wakes from a
pause is told before its next step. Only the fencing token protects the
resource during the pause itself. ``asyncio`` programs use ``alock`` and
the other ``a``-methods, on the event loop's own sockets.

Semaphores and read/write locks: ``client.lock(name, limit=4)`` takes one
of 4 slots; ``client.lock(name, shared=True)`` is a reader, beside which
the name's writers take ordinary (exclusive) claims. A shared claim whose
limit differs from the name's raises ``LimitMismatch``.
"""

import logging as _logging
import os as _os
import sys as _sys
from importlib import metadata as _metadata

if _sys.version_info >= (3, 11):
    import tomllib as _tomllib

from .client import DEFAULT_DIAL_TIMEOUT, DEFAULT_LEASE, Client, WaitState
from .election import AsyncLeadership, Leadership
from .errors import (
    AlreadyHeld,
    BadRequest,
    Busy,
    ConnectionBroken,
    Error,
    ForceReleased,
    InsecureTLS,
    Kicked,
    LeaseExpired,
    LimitMismatch,
    LockLost,
    MaxHoldReached,
    NotLeader,
    Overloaded,
    ProtocolError,
    ServerError,
    SharedClaim,
    Shutdown,
    TLSError,
    TLSRefused,
    StaleToken,
    Unauthorized,
    Unconfirmed,
    VersionError,
    is_retryable,
)
from .held import READER_LIMIT, AsyncHeld, Held
from .many import AsyncHeldMany, HeldMany
from .ops import Leader

__all__ = [
    "Client",
    "Held",
    "AsyncHeld",
    "HeldMany",
    "AsyncHeldMany",
    "Leadership",
    "AsyncLeadership",
    "WaitState",
    "Leader",
    "is_retryable",
    "TLSError",
    "TLSRefused",
    "DEFAULT_LEASE",
    "DEFAULT_DIAL_TIMEOUT",
    "READER_LIMIT",
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
    "StaleToken",
    "SharedClaim",
]


# A library's logger stays silent until the program configures logging
# (the logging HOWTO's advice for libraries).
_logging.getLogger("baton").addHandler(_logging.NullHandler())


def _version() -> str:
    """The version in pyproject.toml, the one source: read from it in a source
    tree, else from the installed distribution's metadata (which the build
    backend wrote from it)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    pyproject = _os.path.join(_os.path.dirname(here), "pyproject.toml")
    if _sys.version_info >= (3, 11) and _os.path.exists(pyproject):
        try:
            with open(pyproject, "rb") as f:
                project = _tomllib.load(f).get("project", {})
            if project.get("name") == "baton-client":
                return str(project["version"])
        except (OSError, ValueError, KeyError):
            pass  # not our file: the metadata says
    try:
        return _metadata.version("baton-client")
    except _metadata.PackageNotFoundError:
        return "unknown"


__version__ = _version()
