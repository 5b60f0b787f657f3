"""Fencing kits: make the resource a lock guards refuse a stale holder.

Each kit keeps a high-water mark per lock name at the resource and refuses
a token below it in the same atomic step as the write. They take a
``held`` (a ``Held``, or ``Token(name, token)`` for a token received some
other way, such as ``BATON_TOKEN``) and the user's own client for the
resource, so the package still needs nothing but the standard library::

    from baton import fence

    with client.lock("jobs/nightly") as held:
        with conn:                                   # a DB-API connection
            cur = conn.cursor()
            fence.postgres(cur, held)                # first statement
            cur.execute("UPDATE jobs SET state = %s WHERE id = %s", ("done", 7))

- PostgreSQL: ``postgres(cursor, held)`` calls ``baton_fence``
  (``install_postgres``, or fence/postgres/baton_fence.sql).
- Redis: ``redis_check`` and ``redis_set`` run the Lua scripts by EVALSHA
  through a callable that sends one command (redis-py's
  ``r.execute_command``).
- HTTP: ``header(held)`` is the ``Baton-Fence`` header for a service
  behind the Go middleware; ``FenceHandler`` adds it to every request of a
  ``urllib`` opener.
- Files: ``write_file`` writes through a temporary file and a rename under
  ``flock(2)`` on a ``.fence`` sidecar; ``check_file`` raises the mark.

Call the kit at the first access after the grant, reads included, so a
stale holder that read before the newer one and writes after it is
refused. A stale token raises ``StaleToken``. A shared claim with a limit
above 1 raises ``SharedClaim``: a mark per name would refuse its live
holders with lower tokens (docs/fencing.md shows the per-record pattern).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

from .errors import SharedClaim, StaleToken

__all__ = [
    "Token",
    "HEADER",
    "postgres",
    "install_postgres",
    "redis_check",
    "redis_set",
    "header",
    "FenceHandler",
    "check_file",
    "write_file",
    "POSTGRES_SQL",
    "REDIS_FENCE_LUA",
    "REDIS_FENCED_SET_LUA",
]

_MAX = 2**64 - 1


def _read(name: str) -> str:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fence_scripts", name), encoding="utf-8") as f:
        return f.read()


# The resource-side halves: copies of the Baton repository's fence/ files.
POSTGRES_SQL = _read("baton_fence.sql")
REDIS_FENCE_LUA = _read("fence.lua")
REDIS_FENCED_SET_LUA = _read("fenced_set.lua")
_FENCE_SHA = hashlib.sha1(REDIS_FENCE_LUA.encode()).hexdigest()
_SET_SHA = hashlib.sha1(REDIS_FENCED_SET_LUA.encode()).hexdigest()


class Token(NamedTuple):
    """A lock's name and a fencing token received some other way (the
    ``BATON_TOKEN`` of ``baton run``), for the kits."""

    name: str
    token: int


def _check(held: Any) -> Tuple[str, int]:
    name, token = held.name, held.token
    if getattr(held, "shared", False) and getattr(held, "limit", 1) > 1:
        raise SharedClaim(
            f"fence: lock {name!r} is a shared claim with limit {held.limit}: its holders' tokens are all current, "
            "and a mark per name would refuse the live ones granted earlier; fence per record with each holder's token (docs/fencing.md)")
    if not isinstance(name, str) or not name:
        raise ValueError("fence: the lock name is empty")
    if isinstance(token, bool) or not isinstance(token, int) or not 1 <= token <= _MAX:
        raise ValueError(f"fence: lock {name!r}: token {token!r} is not a fencing token (an integer from 1 to 2**64-1)")
    return name, token


def _positional(name: str, token: str) -> Any:
    return (name, token)


def _named(name: str, token: str) -> Any:
    return {"name": name, "token": token}


# The query and its parameters for each DB-API paramstyle.
_PLACEHOLDERS: Dict[str, Tuple[str, Callable[[str, str], Any]]] = {
    "format": ("SELECT baton_fence(%s, %s::numeric)", _positional),
    "pyformat": ("SELECT baton_fence(%(name)s, %(token)s::numeric)", _named),
    "qmark": ("SELECT baton_fence(?, ?::numeric)", _positional),
    "numeric": ("SELECT baton_fence(:1, :2::numeric)", _positional),
    "named": ("SELECT baton_fence(:name, :token::numeric)", _named),
}


def postgres(cursor: Any, held: Any, paramstyle: str = "format") -> None:
    """Fences a PostgreSQL transaction: call it on the transaction's cursor
    as its first statement, before it reads what it will write. It calls
    ``baton_fence``, which records the token as the lock's mark or raises;
    a stale token raises ``StaleToken`` (from the driver's error), and the
    transaction, aborted, must be rolled back. The mark's row stays locked
    until the transaction ends. ``paramstyle`` is the driver's (the
    module's ``paramstyle``: psycopg and pg8000 use "format", the
    default). The token is sent as text, cast to numeric: it passes bigint."""
    name, token = _check(held)
    try:
        query, params = _PLACEHOLDERS[paramstyle]
    except KeyError:
        raise ValueError(f"fence: paramstyle {paramstyle!r} is not one of {sorted(_PLACEHOLDERS)}") from None
    try:
        cursor.execute(query, params(name, str(token)))
    except Exception as e:
        if "stale fencing token" in str(e):
            raise StaleToken(name, token, str(e).strip()) from e
        raise


def install_postgres(cursor: Any) -> None:
    """Loads baton_fence.sql (the table of marks and the function) through
    cursor; it keeps every mark that exists. Commit afterwards."""
    cursor.execute(POSTGRES_SQL)


def _eval(do: Callable[..., Any], name: str, token: int, script: str, sha: str, keys: List[str], args: List[str]) -> None:
    try:
        try:
            reply = do("EVALSHA", sha, len(keys), *keys, *args)
        except Exception as e:
            if not str(e).startswith("NOSCRIPT"):
                raise
            reply = do("EVAL", script, len(keys), *keys, *args)
    except Exception as e:
        if str(e).startswith("STALE"):
            raise StaleToken(name, token, str(e)) from e
        raise
    if reply != 1:
        raise RuntimeError(f"fence: lock {name!r}: redis answered {reply!r}, want 1")


def redis_check(do: Callable[..., Any], mark_key: str, held: Any) -> None:
    """Checks and records the token in the mark at ``mark_key``
    (fence/redis/fence.lua), by EVALSHA, with EVAL when the server lacks
    the script. ``do(*args)`` sends one command and raises on an error
    reply with the reply's text (redis-py's ``r.execute_command``). A
    stale token raises ``StaleToken``. Call it at the grant, before
    reading what will be written; write with ``redis_set``."""
    name, token = _check(held)
    _eval(do, name, token, REDIS_FENCE_LUA, _FENCE_SHA, [mark_key], [str(token)])


def redis_set(do: Callable[..., Any], mark_key: str, held: Any, key: str, value: str) -> None:
    """Sets ``key`` to ``value`` if the token is at least the mark at
    ``mark_key``, recording it, in one step (fence/redis/fenced_set.lua);
    a stale token writes nothing and raises ``StaleToken``. In Redis
    Cluster both keys need one hash slot ({jobs}:mark, {jobs}:data)."""
    name, token = _check(held)
    _eval(do, name, token, REDIS_FENCED_SET_LUA, _SET_SHA, [mark_key, key], [str(token), value])


HEADER = "Baton-Fence"


def header(held: Any) -> Tuple[str, str]:
    """The ``Baton-Fence: <name>=<token>`` header for a service behind the
    Go middleware (fence.Guard): the name percent-encoded (all but letters,
    digits, ``-._~`` and ``/``), the token in decimal. Send it on every
    request made under the lock, reads included::

        requests.put(url, data=body, headers=dict([fence.header(held)]))
    """
    name, token = _check(held)
    return HEADER, urllib.parse.quote(name, safe="/") + "=" + str(token)


class FenceHandler(urllib.request.BaseHandler):
    """Adds the Baton-Fence header to every request of a urllib opener::

        opener = urllib.request.build_opener(fence.FenceHandler(held))
        opener.open(urllib.request.Request(url, data=body, method="PUT"))

    A stale token is answered 409 Conflict: urllib raises HTTPError."""

    def __init__(self, held: Any) -> None:
        self._header = header(held)

    def http_request(self, req: urllib.request.Request) -> urllib.request.Request:
        req.add_unredirected_header(*self._header)
        return req

    https_request = http_request


SIDECAR_SUFFIX = ".fence"


def _with_mark(path: str, name: str, token: int, then: "Callable[[], None] | None") -> None:
    side = path + SIDECAR_SUFFIX
    fd = os.open(side, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released with the close
        raw = os.read(fd, 65536).decode("utf-8", "replace")
        line = urllib.parse.quote(name, safe="/") + "=" + f"{token:020d}\n"
        if raw:
            first = raw.split("\n", 1)[0]
            seen_name, _, digits = first.rpartition("=")
            if not seen_name or not digits.isdigit():
                raise ValueError(f"fence: {side}: not a mark: {first!r}")
            seen_name, seen = urllib.parse.unquote(seen_name), int(digits)
            if seen_name != name:
                raise ValueError(f"fence: {path} is fenced by lock {seen_name!r}, not {name!r}")
            if token < seen:
                raise StaleToken(name, token, f"stale fencing token {token}: {side} has seen token {seen}")
            if token == seen:
                line = ""
        if line:
            # The same length for one name: written over in place, so
            # there is no moment without a mark.
            os.pwrite(fd, line.encode(), 0)
            os.fsync(fd)
        if then is not None:
            then()
    finally:
        os.close(fd)


def check_file(path: str, held: Any) -> None:
    """Records the token as the mark of the file at ``path`` (its sidecar
    ``path + ".fence"``, under flock(2)), or raises ``StaleToken``. Call it
    at the grant, before reading the file."""
    name, token = _check(held)
    _with_mark(path, name, token, None)


def write_file(path: str, data: bytes, held: Any, mode: int = 0o644) -> None:
    """Writes ``data`` to ``path`` so that a stale holder's write never
    lands: into a temporary file beside it (synced), then, under flock(2)
    on the sidecar, the token is checked and recorded and the file renamed
    over ``path``. A stale token raises ``StaleToken`` and removes the
    temporary file. The same sidecar as the Go client's ``fence.WriteFile``."""
    name, token = _check(held)
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=directory)
    landed = False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
            f.flush()
            os.fsync(f.fileno())

        def rename() -> None:
            nonlocal landed
            os.replace(tmp, path)
            landed = True
            dfd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

        _with_mark(path, name, token, rename)
    finally:
        if not landed:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
