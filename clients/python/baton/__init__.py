"""Baton's Python client: named locks where the TCP connection is the claim.

    import baton

    client = baton.Client(["127.0.0.1:7070"], lease=10.0)
    with client.lock("jobs") as held:
        do_work(fence=held.token)   # check held.lost / held.check() as you go

Closing the connection is the release; the server pushes the lock to the
next waiter at once. Heartbeats keep the lock while the process lives; if
the server confirms nothing for 0.8 x lease the client gives the lock up
itself, before the server can give it to another. Loss is never silent:
``held.lost`` is set at once, and leaving the block raises LockLost.
"""

from .client import DEFAULT_DIAL_TIMEOUT, DEFAULT_LEASE, Client, Held
from .errors import (
    BadRequest,
    Busy,
    ConnectionBroken,
    Error,
    ForceReleased,
    Kicked,
    LeaseExpired,
    LockLost,
    NotLeader,
    Overloaded,
    ProtocolError,
    ServerError,
    Shutdown,
    Unauthorized,
    Unconfirmed,
    VersionError,
)

__all__ = [
    "Client",
    "Held",
    "DEFAULT_LEASE",
    "DEFAULT_DIAL_TIMEOUT",
    "Error",
    "LockLost",
    "Unconfirmed",
    "ConnectionBroken",
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
]
__version__ = "0.1.0"
