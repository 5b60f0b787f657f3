"""The fencing kits' guarded counter, "n writer", for test_fence.py and
its holder process: one class per resource, fenced or not, each with
begin (the fence's check, then the read) and write (of n by writer)."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from typing import Any, Tuple

import minipg
import miniredis

from baton import fence

MARK, DATA = "{fenced/counter}:mark", "{fenced/counter}:data"


def parse(v: "str | None") -> Tuple[int, str]:
    n, _, w = (v or "0 ").strip().partition(" ")
    return int(n or 0), w


def pg_connect() -> minipg.Connection:
    host, port = os.environ["BATON_TEST_POSTGRES"].rsplit(":", 1)
    return minipg.connect(host, int(port), os.environ["BATON_TEST_POSTGRES_USER"], os.environ["BATON_TEST_POSTGRES_DB"])


class Postgres:
    """Two transactions, each begun with baton_fence: one reads, one writes."""

    def __init__(self, fenced: bool) -> None:
        self.conn, self.fenced = pg_connect(), fenced

    def _tx(self, held: Any, sql: str, params: tuple = ()) -> Any:
        cur = self.conn.cursor()
        try:
            if self.fenced:
                fence.postgres(cur, held)
            cur.execute(sql, params)
            row = cur.fetchone()
            self.conn.commit()
            return row
        except BaseException:
            self.conn.rollback()
            raise

    def begin(self, held: Any) -> int:
        return int(self._tx(held, "SELECT n FROM counter")[0])

    def write(self, held: Any, n: int, writer: str) -> None:
        self._tx(held, "UPDATE counter SET n = %s, writer = %s", (n, writer))

    def close(self) -> None:
        self.conn.close()


class Redis:
    def __init__(self, fenced: bool) -> None:
        host, port = os.environ["BATON_TEST_REDIS"].rsplit(":", 1)
        self.r, self.fenced = miniredis.Redis(host, int(port)), fenced

    def begin(self, held: Any) -> int:
        if self.fenced:
            fence.redis_check(self.r.execute_command, MARK, held)
        return parse(self.r.execute_command("GET", DATA))[0]

    def write(self, held: Any, n: int, writer: str) -> None:
        if self.fenced:
            fence.redis_set(self.r.execute_command, MARK, held, DATA, f"{n} {writer}")
        else:
            self.r.execute_command("SET", DATA, f"{n} {writer}")

    def close(self) -> None:
        self.r.close()


class HTTP:
    """The counter service behind the Go middleware (fencedcounter)."""

    def __init__(self, fenced: bool, url: str) -> None:
        self.url, self.fenced = url, fenced

    def _send(self, held: Any, method: str, body: "bytes | None" = None) -> str:
        opener = urllib.request.build_opener(*([fence.FenceHandler(held)] if self.fenced else []))
        try:
            with opener.open(urllib.request.Request(self.url, data=body, method=method), timeout=10) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            if e.code == 409:
                raise baton_stale(held, e.read().decode()) from e
            raise

    def begin(self, held: Any) -> int:
        return parse(self._send(held, "GET"))[0]

    def write(self, held: Any, n: int, writer: str) -> None:
        self._send(held, "PUT", f"{n} {writer}".encode())


def baton_stale(held: Any, body: str) -> Exception:
    import baton
    return baton.StaleToken(held.name, held.token, body)


class File:
    def __init__(self, fenced: bool, path: str) -> None:
        self.path, self.fenced = path, fenced

    def begin(self, held: Any) -> int:
        if self.fenced:
            fence.check_file(self.path, held)
        try:
            with open(self.path) as f:
                return parse(f.read())[0]
        except FileNotFoundError:
            return 0

    def write(self, held: Any, n: int, writer: str) -> None:
        data = f"{n} {writer}".encode()
        if self.fenced:
            fence.write_file(self.path, data, held)
        else:
            tmp = f"{self.path}.tmp-{writer}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)


def make(kind: str, fenced: bool, where: str) -> Any:
    if kind == "postgres":
        return Postgres(fenced)
    if kind == "redis":
        return Redis(fenced)
    if kind == "http":
        return HTTP(fenced, where)
    return File(fenced, where)
