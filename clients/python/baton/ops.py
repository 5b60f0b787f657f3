"""The server's ops API, for what the lock protocol cannot ask: who holds
a name (an election's leader) and each new holder as it comes (internal).

Every node of a cluster answers it, a follower by asking the leader: GET
/v1/locks/{name} for the holder, and the event stream GET /v1/events for
its changes (Server-Sent Events)."""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple, cast

from .core import backoff
from .errors import BadRequest, ConnectionBroken, Error, InsecureTLS

__all__ = ["Leader", "OpsAPI"]


@dataclass(frozen=True)
class Leader:
    """An election's leader: the value it campaigned with (the lock's owner
    text) and the fencing token of its term."""

    value: str
    token: int


class OpsError(Error):
    """The ops API answered a question with an error (401: give
    ``admin_token``; 403; ...)."""


def _obj(x: Any) -> Dict[str, Any]:
    """x if it is a JSON object, else an empty one."""
    return cast(Dict[str, Any], x) if isinstance(x, dict) else {}


def _leader_of(lock: Dict[str, Any]) -> Optional[Leader]:
    holder = _obj(lock.get("holder"))
    token = holder.get("token")
    if not isinstance(token, int) or isinstance(token, bool):
        return None
    return Leader(str(holder.get("owner", "")), token)


def check_verifies(ctx: ssl.SSLContext) -> None:
    """Raises InsecureTLS if ctx would let any server answer (see there)."""
    if ctx.verify_mode == ssl.CERT_NONE:
        raise InsecureTLS(
            "ssl_context verifies no server certificate (verify_mode is CERT_NONE, as in a bare "
            "ssl.SSLContext()): any server, or anyone on the path, could answer as the lock server; "
            "build it with ssl.create_default_context(cafile=...), or pass insecure_tls=True to accept that")
    if not ctx.check_hostname:
        raise InsecureTLS(
            "ssl_context does not check the server's name (check_hostname is False): any server "
            "with a certificate of a trusted CA could answer as the lock server; "
            "build it with ssl.create_default_context(cafile=...), or pass insecure_tls=True to accept that")


class OpsAPI:
    """The ops API at ``addrs`` (host:port, https with an SSL context, or
    an http(s):// URL each), tried in order."""

    def __init__(self, addrs: List[str], token: Optional[str], ssl_context: Optional[ssl.SSLContext],
                 timeout: float = 10.0, insecure_tls: bool = False) -> None:
        self._bases: List[Tuple[str, str, int]] = []
        for a in addrs:
            u = urllib.parse.urlsplit(a if "://" in a else ("https://" if ssl_context else "http://") + a)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise BadRequest(f"ops address {a!r} is not host:port or an http(s) URL")
            if u.scheme == "http" and token and ssl_context is not None and not insecure_tls:
                # The caller asked for TLS: the token must not go in clear
                # because one address was written http://.
                raise InsecureTLS(
                    f"ops address {a!r} is plain http, and the admin token would be sent in clear beside "
                    "an ssl_context; write it https:// (or host:port), or pass insecure_tls=True to accept that")
            self._bases.append((u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80)))
        self._token = token
        self._ssl = ssl_context
        self._insecure_tls = insecure_tls
        self._timeout = timeout
        self._next = 0

    def _conn(self, i: int, timeout: Optional[float]) -> http.client.HTTPConnection:
        scheme, host, port = self._bases[i]
        t = self._timeout if timeout is None else timeout
        if scheme == "https":
            if self._ssl is not None and not self._insecure_tls:
                check_verifies(self._ssl)  # as at every lock dial: a context weakened since is refused
            return http.client.HTTPSConnection(host, port, timeout=t, context=self._ssl)
        return http.client.HTTPConnection(host, port, timeout=t)

    def _get(self, path: str, accept: str, timeout: Optional[float] = None) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """GET path from the first node that answers (the one that answered
        last first)."""
        if not self._bases:
            raise BadRequest("no ops API address: give the Client ops_addrs (the server's -ops-addr)")
        errors: List[str] = []
        for k in range(len(self._bases)):
            i = (self._next + k) % len(self._bases)
            conn = self._conn(i, timeout)
            try:
                headers = {"Accept": accept}
                if self._token:
                    headers["Authorization"] = f"Bearer {self._token}"
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                errors.append(f"{self._bases[i][1]}:{self._bases[i][2]}: {e}")
                continue
            self._next = i
            return conn, resp
        raise ConnectionBroken("no ops API answered: " + "; ".join(errors))

    @staticmethod
    def _refusal(resp: http.client.HTTPResponse) -> OpsError:
        body = resp.read(1 << 16)
        msg = resp.reason
        try:
            err = _obj(json.loads(body)).get("error")
            if isinstance(err, str):
                msg = err
        except ValueError:
            pass
        return OpsError(f"the ops API answered {resp.status}: {msg}")

    def leader(self, name: str) -> Optional[Leader]:
        conn, resp = self._get("/v1/locks/" + urllib.parse.quote(name, safe=""), "application/json")
        try:
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise self._refusal(resp)
            return _leader_of(_obj(json.loads(resp.read(1 << 20))))
        finally:
            conn.close()

    def observe(self, name: str, timeout: Optional[float], pace: Tuple[float, float]) -> Iterator[Leader]:
        deadline = None if timeout is None else time.monotonic() + timeout
        last: Optional[Leader] = None
        first = self.leader(name)  # refusals and a wrong address are raised here, at once
        if first is not None:
            last = first
            yield first
        failures = 0
        path = "/v1/events?snapshot=1&lock=" + urllib.parse.quote(name, safe="")
        while deadline is None or time.monotonic() < deadline:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                # The server sends a keepalive every 15s: a silent minute
                # is a dead stream.
                conn, resp = self._get(path, "text/event-stream", timeout=60.0 if left is None else min(left, 60.0))
            except ConnectionBroken:
                conn = None
                resp = None
            if resp is not None and conn is not None:
                try:
                    if resp.status != 200:
                        raise self._refusal(resp)
                    for leader in _granted(resp, name):
                        failures = 0
                        if leader != last:
                            last = leader
                            yield leader
                except (OSError, http.client.HTTPException):
                    pass  # the stream broke, or timed out: follow it again
                finally:
                    conn.close()
            failures += 1
            pause = backoff(failures, *pace)
            if deadline is not None:
                pause = min(pause, max(deadline - time.monotonic(), 0))
            time.sleep(pause)


def _granted(resp: http.client.HTTPResponse, name: str) -> Iterator[Leader]:
    """The holders of name that an event stream tells of: its snapshot's,
    then each granted event's."""
    typ, data = "", ""
    while True:
        raw = resp.readline(1 << 20)
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line:
            field, _, value = line.partition(":")
            if field == "event":
                typ = value.strip()
            elif field == "data":
                data = value.strip()
            continue
        try:
            doc = _obj(json.loads(data)) if data else {}
        except ValueError:
            doc = {}
        if typ in ("snapshot", "resync"):
            locks = doc.get("locks")
            for lock in cast(List[Any], locks) if isinstance(locks, list) else []:
                one = _obj(lock)
                leader = _leader_of(one)
                if leader is not None and one.get("name") == name:
                    yield leader
        elif typ == "granted" and doc.get("lock") == name:
            leader = _leader_of({"holder": doc.get("session")})
            if leader is not None:
                yield leader
        elif typ == "shutdown":
            return
        typ, data = "", ""
