"""A test-only Redis client of redis-py's shape for the fencing kit's
tests (no package index here): RESP2 over TCP; execute_command sends one
command and returns its reply, raising ResponseError with the reply's
text for an error reply, as redis-py does."""

from __future__ import annotations

import socket
from typing import Any


class ResponseError(Exception):
    pass


class Redis:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.f = self.sock.makefile("rb")

    def execute_command(self, *args: Any) -> Any:
        out = b"*%d\r\n" % len(args)
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(b), b)
        self.sock.sendall(out)
        return self._reply()

    def _reply(self) -> Any:
        line = self.f.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise ResponseError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError(f"bad reply {line!r}")

    def close(self) -> None:
        self.f.close()
        self.sock.close()
