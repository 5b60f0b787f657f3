"""A test-only PostgreSQL driver of the DB-API's shape, for the fencing
kit's tests where no driver can be installed (there is no package index
here): the wire protocol v3's simple queries over TCP, trust
authentication only, parameters interpolated on the client as psycopg2
does (paramstyle "format"). Errors raise Error with the server's message
and SQLSTATE."""

from __future__ import annotations

import socket
import struct
from typing import Any, List, Optional, Sequence, Tuple

paramstyle = "format"


class Error(Exception):
    def __init__(self, fields: "dict[str, str]") -> None:
        super().__init__(f"{fields.get('S', 'ERROR')}: {fields.get('M', '')}")
        self.sqlstate = fields.get("C", "")
        self.message = fields.get("M", "")


def _literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


class Connection:
    def __init__(self, host: str, port: int, user: str, database: str) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        body = struct.pack(">I", 196608) + b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in
                                                     (("user", user), ("database", database), ("client_encoding", "UTF8"))) + b"\0"
        self.sock.sendall(struct.pack(">I", len(body) + 4) + body)
        self.in_tx = False
        while True:
            t, p = self._read()
            if t == b"R" and struct.unpack(">I", p[:4])[0] != 0:
                raise Error({"M": "minipg knows trust authentication only"})
            if t == b"E":
                raise Error(self._fields(p))
            if t == b"Z":
                break

    def _recv(self, n: int) -> bytes:
        b = b""
        while len(b) < n:
            chunk = self.sock.recv(n - len(b))
            if not chunk:
                raise Error({"M": "the server closed the connection"})
            b += chunk
        return b

    def _read(self) -> Tuple[bytes, bytes]:
        t = self._recv(1)
        n = struct.unpack(">I", self._recv(4))[0]
        return t, self._recv(n - 4)

    @staticmethod
    def _fields(p: bytes) -> "dict[str, str]":
        out = {}
        for f in p.split(b"\0"):
            if f:
                out[chr(f[0])] = f[1:].decode()
        return out

    def simple(self, sql: str) -> List[Tuple[Optional[str], ...]]:
        """Runs sql; returns the rows of its last result as text."""
        q = sql.encode() + b"\0"
        self.sock.sendall(b"Q" + struct.pack(">I", len(q) + 4) + q)
        rows: List[Tuple[Optional[str], ...]] = []
        err = None
        while True:
            t, p = self._read()
            if t == b"T":
                rows = []
            elif t == b"D":
                n = struct.unpack(">H", p[:2])[0]
                i, row = 2, []
                for _ in range(n):
                    ln = struct.unpack(">i", p[i:i + 4])[0]
                    i += 4
                    if ln < 0:
                        row.append(None)
                    else:
                        row.append(p[i:i + ln].decode())
                        i += ln
                rows.append(tuple(row))
            elif t == b"E":
                err = Error(self._fields(p))
            elif t == b"Z":
                self.in_tx = p != b"I"
                if err is not None:
                    raise err
                return rows

    def cursor(self) -> "Cursor":
        return Cursor(self)

    def commit(self) -> None:
        if self.in_tx:
            self.simple("COMMIT")

    def rollback(self) -> None:
        if self.in_tx:
            self.simple("ROLLBACK")

    def close(self) -> None:
        try:
            self.sock.sendall(b"X\0\0\0\4")
        finally:
            self.sock.close()


class Cursor:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.rows: List[Tuple[Optional[str], ...]] = []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        if params:
            sql = sql % tuple(_literal(v) for v in params)
        if not self.conn.in_tx:  # the DB-API's implicit transaction
            self.conn.simple("BEGIN")
        self.rows = self.conn.simple(sql)

    def fetchone(self) -> Optional[Tuple[Optional[str], ...]]:
        return self.rows.pop(0) if self.rows else None


def connect(host: str, port: int, user: str, database: str) -> Connection:
    return Connection(host, port, user, database)
