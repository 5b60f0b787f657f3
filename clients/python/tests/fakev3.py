"""Servers of protocol version 3 for the client's tests, on real TCP
(127.0.0.1:0), written from docs/protocol.md section 14 and checked
against the shared vectors (test_v3_vectors.py plays every conversation
of vectors.json against FakeCluster):

- FakeCluster: a lock table shared by the nodes of a pretend cluster, of
  which one, the leader, serves; credentials made with HMAC-SHA256 and the
  vectors' test key; claims moved only to a higher attempt number, the
  connection left told MOVED. What a real server's timing adds (leases
  that expire, graces, generations every R) it leaves out: a test drives
  those moments itself (handover, shutdown, crash, freeze, reset,
  new_generation).
- Scripted: listeners whose connections the test plays by hand, frame by
  frame (Peer), to put each rule of the client to the test: answers out of
  order, late, refused.

Closing a socket another thread is blocked reading sends nothing on Linux
until the read returns, so every end here is a shutdown() first, then the
reading thread's close().
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import socket
import ssl
import struct
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import support  # noqa: F401  (puts the package under test on the path)
from baton import wire

KEY = bytes(range(32))  # the vectors' test key
CLUSTER_ID = "0123456789abcdef"

CODES = {"SHUTDOWN": 0x01, "OVERLOADED": 0x02, "NOT_LEADER": 0x03, "LEASE_EXPIRED": 0x10, "FORCE_RELEASED": 0x11,
         "KICKED": 0x12, "BUSY": 0x13, "RESUME_REFUSED": 0x14, "SUPERSEDED": 0x15, "MOVED": 0x16, "PROTOCOL": 0x20,
         "BAD_REQUEST": 0x21, "VERSION": 0x22, "UNAUTHORIZED": 0x23, "LIMIT_MISMATCH": 0x24, "BAD_CREDENTIAL": 0x25}
NAMES = {v: k for k, v in CODES.items()}


class Refused(Exception):
    """An ACQUIRE the server refuses with an ERROR."""

    def __init__(self, code: str, msg: str = "") -> None:
        super().__init__(f"{code}: {msg}")
        self.code, self.msg = code, msg


class Acquire:
    """An ACQUIRE frame, decoded as a server does (rows 1 to 13 of section
    14's table, in order)."""

    def __init__(self) -> None:
        self.version = 0
        self.flags = 0
        self.lease_ms = 0
        self.limit = 0
        self.name = b""
        self.owner = b""
        self.resume_id = 0
        self.generation = 0
        self.attempt = 0
        self.credential = b""

    @property
    def nowait(self) -> bool:
        return bool(self.flags & wire.FLAG_NOWAIT)

    @property
    def shared(self) -> bool:
        return bool(self.flags & wire.FLAG_SHARED)

    @property
    def resuming(self) -> bool:
        return self.version == 3 and bool(self.flags & wire.FLAG_RESUME)

    @property
    def held(self) -> bool:
        return bool(self.flags & wire.FLAG_HELD)


def decode_acquire(p: bytes, newest: int = 3) -> Acquire:
    if not p:
        raise Refused("PROTOCOL", "empty ACQUIRE payload")
    a = Acquire()
    a.version = p[0]
    if not 1 <= a.version <= newest:
        raise Refused("VERSION", f"protocol version {a.version} is not supported, want 1 to {newest}")
    fixed = 7 if a.version == 1 else 9
    if len(p) < fixed:
        raise Refused("PROTOCOL", f"payload of {len(p)} bytes is shorter than {fixed}")
    resuming = a.version == 3 and bool(p[1] & wire.FLAG_RESUME)
    if resuming:
        fixed = 39
        if len(p) < fixed:
            raise Refused("PROTOCOL", f"RESUME: payload of {len(p)} bytes is shorter than 39")
    name_len = p[fixed - 1]
    if len(p) < fixed + name_len:
        raise Refused("PROTOCOL", "shorter than the fixed part + name_len")
    a.flags = p[1]
    a.lease_ms = struct.unpack(">I", p[2:6])[0]
    a.name, a.owner = p[fixed:fixed + name_len], p[fixed + name_len:]
    if a.version != 1:
        a.limit = struct.unpack(">H", p[6:8])[0]
    if resuming:
        a.resume_id, a.generation, a.attempt = struct.unpack(">QIH", p[8:22])
        a.credential = p[22:38]
    known = wire.FLAG_NOWAIT | {1: 0, 2: wire.FLAG_SHARED, 3: wire.FLAG_SHARED | wire.FLAG_RESUME | wire.FLAG_HELD}[a.version]
    if a.flags & ~known:
        raise Refused("BAD_REQUEST", f"unknown ACQUIRE flags 0x{a.flags & ~known:02x}")
    if a.flags & wire.FLAG_HELD and not resuming:
        raise Refused("BAD_REQUEST", "HELD without RESUME")
    if resuming and a.nowait:
        raise Refused("BAD_REQUEST", "NOWAIT with RESUME")
    if a.lease_ms == 0:
        raise Refused("BAD_REQUEST", "lease 0ms")
    if a.version != 1 and (a.limit == 0 or (a.limit > 1 and not a.shared)):
        raise Refused("BAD_REQUEST", f"limit {a.limit}")
    if resuming and 0 in (a.resume_id, a.generation, a.attempt):
        raise Refused("BAD_REQUEST", "a resume's id, generation and attempt are never 0")
    try:
        wire.check_name(a.name)
        wire.check_owner(a.owner)
    except wire.BadRequest as e:
        raise Refused("BAD_REQUEST", str(e)) from None
    return a


def credential(role: str, gen: int, shared: bool, limit: int, lease_ms: int, ident: int, name: bytes,
               cluster_id: str = CLUSTER_ID, key: bytes = KEY, client_key: bytes = b"") -> bytes:
    """What a server computes: the first 16 bytes of HMAC-SHA256 over the
    message of section 14."""
    msg = credential_message(role, gen, shared, limit, lease_ms, ident, name, cluster_id, client_key)
    return hmac.new(key, msg, hashlib.sha256).digest()[:16]


def credential_message(role: str, gen: int, shared: bool, limit: int, lease_ms: int, ident: int, name: bytes,
                       cluster_id: str = CLUSTER_ID, client_key: bytes = b"") -> bytes:
    cid = cluster_id.encode()
    return (b"baton v3 claim" + role.encode() + bytes([len(cid)]) + cid + struct.pack(">IBHIQ", gen, shared, limit,
                                                                                        lease_ms, ident)
            + bytes([len(client_key)]) + client_key + bytes([len(name)]) + name)


def frame(ftype: int, payload: bytes) -> bytes:
    return struct.pack(">BH", ftype, len(payload)) + payload


def error_frame(code: str, msg: str = "") -> bytes:
    return frame(wire.T_ERROR, bytes([CODES[code]]) + msg.encode())


def acquired_frame(token: int, gen: int = 0, cred: bytes = b"", push: bool = False) -> bytes:
    flags = wire.FLAG_PUSH if push else 0
    if gen:
        return frame(wire.T_ACQUIRED, bytes([flags | wire.FLAG_CREDENTIAL]) + struct.pack(">QI", token, gen) + cred)
    return frame(wire.T_ACQUIRED, bytes([flags]) + struct.pack(">Q", token))


def waiting_frame(position: int, ticket: int = 0, gen: int = 0, cred: bytes = b"") -> bytes:
    if ticket:
        return frame(wire.T_WAITING, bytes([wire.FLAG_TICKET]) + struct.pack(">IQI", position, ticket, gen) + cred)
    return frame(wire.T_WAITING, bytes([0]) + struct.pack(">I", position))


def read_frame(sock: socket.socket) -> Optional[Tuple[int, bytes]]:
    """One frame, or None at the end of the stream."""
    head = read_exactly(sock, 3)
    if head is None:
        return None
    n = (head[1] << 8) | head[2]
    p = read_exactly(sock, n) if n else b""
    if p is None:
        return None
    return head[0], p


def read_exactly(sock: socket.socket, n: int) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def reset(sock: socket.socket) -> None:
    """Arms a reset for sock's close (SO_LINGER 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


class _Listener:
    """A listener on 127.0.0.1:0 whose every connection goes to on_conn, in a
    thread of its own; TLS with ctx."""

    def __init__(self, on_conn: Callable[[str, socket.socket], None], ctx: Optional[ssl.SSLContext] = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.ctx = ctx
        self._on_conn = on_conn
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        if self.ctx is not None:
            try:
                c = self.ctx.wrap_socket(c, server_side=True)
            except (ssl.SSLError, OSError):
                c.close()
                return
        self._on_conn(self.addr, c)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# The fake cluster.


class FakeClaim:
    def __init__(self, name: bytes, version: int, shared: bool, limit: int, lease_ms: int) -> None:
        self.name, self.version, self.shared, self.limit, self.lease_ms = name, version, shared, limit, lease_ms
        self.ticket = 0
        self.token = 0
        self.cred = version == 3
        self.sent_gen = 0
        self.conn: Optional[FakeConn] = None
        self.attempt = 0


class FakeConn:
    def __init__(self, f: "FakeCluster", node: str, sock: socket.socket) -> None:
        self.f, self.node, self.sock = f, node, sock
        self.claim: Optional[FakeClaim] = None
        self.ended = False  # the server ended it: nothing more is written

    def send(self, b: bytes) -> None:
        if self.ended:
            return
        try:
            self.sock.sendall(b)
        except OSError:
            pass

    def end(self, how: str, b: bytes = b"") -> None:
        """Ends the connection: "close" (b, an ERROR, then a FIN, draining
        until the client closes, as a server does), "die" (a FIN with no
        ERROR: the process went away) or "reset"."""
        if self.ended:
            return
        self.send(b)
        self.ended = True
        try:
            if how == "reset":
                reset(self.sock)
                self.sock.shutdown(socket.SHUT_RD)
            elif how == "die":
                self.sock.shutdown(socket.SHUT_RDWR)
            else:
                self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def fail(self, code: str, msg: str = "") -> None:
        """An ERROR and the end; the claim on it, if this is its connection,
        ends. f.mu must be held."""
        c = self.claim
        if c is not None and c.conn is self:
            self.f.end(c)
        self.claim = None
        self.end("close", error_frame(code, msg))


class FakeCluster:
    """See the module's doc. Every node is a listener; ``leader`` serves."""

    def __init__(self, epoch: int = 3) -> None:
        self.mu = threading.RLock()
        self.listeners: List[_Listener] = []
        self.leader = ""
        self.old: Dict[str, bool] = {}  # nodes that speak versions 1 and 2 only
        self.frozen: List[str] = []  # nodes that answer nothing until unfreeze
        self.later: List[Callable[[], None]] = []  # what frozen nodes do once they wake
        self.gen = 1
        self.epoch = epoch
        self.seq = 0
        self.names: Dict[bytes, Tuple[List[FakeClaim], List[FakeClaim]]] = {}  # holders, queue (in ticket order)
        self.by_id: Dict[int, FakeClaim] = {}
        self.conns: List[FakeConn] = []
        self.resumes: List[Tuple[str, int, bool, str]] = []  # node, attempt, held, answer
        self.accepted: Dict[str, int] = {}
        self.firsts: Dict[str, List[bytes]] = {}  # the first frame of each connection, by node

    def listen(self, ctx: Optional[ssl.SSLContext] = None) -> str:
        ln = _Listener(self._serve, ctx)
        self.listeners.append(ln)
        if not self.leader:
            self.leader = ln.addr
        return ln.addr

    def close(self) -> None:
        for ln in self.listeners:
            ln.close()
        with self.mu:
            conns = list(self.conns)
        for c in conns:
            c.end("die")
        self.frozen = []

    def _next_id(self) -> int:
        self.seq += 1
        return self.epoch << 40 | self.seq

    def _serve(self, node: str, sock: socket.socket) -> None:
        fc = FakeConn(self, node, sock)
        with self.mu:
            self.conns.append(fc)
            self.accepted[node] = self.accepted.get(node, 0) + 1
        first = True
        try:
            while True:
                fr = read_frame(sock)
                if fr is None:
                    return
                while node in self.frozen:
                    time.sleep(0.01)  # frozen: answered late, in order
                ftype, p = fr
                with self.mu:
                    if fc.ended:
                        continue  # draining
                    if first:
                        self.firsts.setdefault(node, []).append(frame(ftype, p))
                    if first and ftype == wire.T_ACQUIRE:
                        self._acquire(fc, p)
                    elif not first and ftype == wire.T_HEARTBEAT and fc.claim is not None:
                        self._heartbeat(fc)
                    else:
                        fc.fail("PROTOCOL", "unexpected frame")
                first = False
        finally:
            self._gone(fc)

    def _gone(self, fc: FakeConn) -> None:
        """The client closed (or reset) the connection: the release of the
        claim it carries."""
        with self.mu:
            if fc in self.conns:
                self.conns.remove(fc)
            c = fc.claim
            if c is not None and c.conn is fc:
                self.end(c)
            fc.claim = None
            fc.ended = True
        try:
            fc.sock.close()
        except OSError:
            pass

    def end(self, c: FakeClaim) -> None:
        holders, q = self.names[c.name]
        if c in holders:
            holders.remove(c)
        if c in q:
            q.remove(c)
        self.by_id.pop(c.ticket, None)
        self.by_id.pop(c.token, None)
        c.conn = None
        self._promote(c.name)

    def _may_hold(self, holders: List[FakeClaim], c: FakeClaim) -> bool:
        if not c.shared:
            return not holders
        return all(h.shared for h in holders) and len(holders) < c.limit

    def _promote(self, name: bytes) -> None:
        """Grants the heads of the queue that may hold; a pending waiter (no
        connection) is never granted, and holds up those behind it."""
        holders, q = self.names[name]
        while q:
            head = q[0]
            if head.conn is None or not self._may_hold(holders, head):
                return
            q.pop(0)
            head.token = self._next_id()
            self.by_id[head.token] = head
            holders.append(head)
            head.conn.send(self._acquired(head, push=True, with_cred=True))

    def credential_of(self, c: FakeClaim, role: str, gen: int) -> bytes:
        return credential(role, gen, c.shared, c.limit, c.lease_ms, c.token if role == "H" else c.ticket, c.name)

    def _acquired(self, c: FakeClaim, push: bool, with_cred: bool) -> bytes:
        if c.cred and with_cred:
            c.sent_gen = self.gen
            return acquired_frame(c.token, self.gen, self.credential_of(c, "H", self.gen), push)
        return acquired_frame(c.token, push=push)

    def _waiting(self, c: FakeClaim, with_cred: bool) -> bytes:
        pos = self.names[c.name][1].index(c) + 1
        if c.cred and with_cred:
            c.sent_gen = self.gen
            return waiting_frame(pos, c.ticket, self.gen, self.credential_of(c, "W", self.gen))
        return waiting_frame(pos)

    def _acquire(self, fc: FakeConn, p: bytes) -> None:
        try:
            a = decode_acquire(p, 2 if self.old.get(fc.node) else 3)
        except Refused as e:
            fc.fail(e.code, e.msg)
            return
        if fc.node != self.leader:
            fc.fail("NOT_LEADER", self.leader)  # without looking at the credential
            return
        if a.resuming:
            self._resume(fc, a)
            return
        holders, q = self.names.setdefault(a.name, ([], []))
        c = FakeClaim(a.name, a.version, a.shared, max(a.limit, 1), a.lease_ms)
        for o in holders + q:
            if o.shared and c.shared and o.limit != c.limit:
                fc.fail("LIMIT_MISMATCH", str(o.limit))
                return
        free = not q and self._may_hold(holders, c)
        if a.nowait and not free:
            fc.fail("BUSY")
            return
        c.ticket = self._next_id()
        self.by_id[c.ticket] = c
        c.conn, fc.claim = fc, c
        if free:
            c.token = self._next_id()
            self.by_id[c.token] = c
            holders.append(c)
            fc.send(self._acquired(c, push=False, with_cred=True))
            return
        q.append(c)
        fc.send(self._waiting(c, with_cred=True))

    def _heartbeat(self, fc: FakeConn) -> None:
        c = fc.claim
        assert c is not None
        fresh = c.cred and c.sent_gen != self.gen
        if c.token:
            fc.send(self._acquired(c, push=False, with_cred=fresh))
        else:
            fc.send(self._waiting(c, with_cred=fresh))

    def _resume(self, fc: FakeConn, a: Acquire) -> None:
        role = "H" if a.held else "W"

        def answer(s: str) -> None:
            self.resumes.append((fc.node, a.attempt, a.held, s))

        want = credential(role, a.generation, a.shared, a.limit, a.lease_ms, a.resume_id, a.name)
        if not hmac.compare_digest(want, a.credential):
            answer("BAD_CREDENTIAL")
            fc.fail("BAD_CREDENTIAL")
            return
        if a.generation + 1 < self.gen:
            answer("RESUME_REFUSED")
            fc.fail("RESUME_REFUSED", "generation too old")
            return
        c = self.by_id.get(a.resume_id)
        if c is None or (a.held and c.token != a.resume_id):
            answer("RESUME_REFUSED")
            fc.fail("RESUME_REFUSED", "claim ended")
            return
        if a.attempt <= c.attempt:
            answer("MOVED")
            fc.fail("MOVED")
            return
        # A move: one step under the lock; the connection left is told MOVED,
        # and its end releases nothing.
        old = c.conn
        c.conn, c.attempt, fc.claim = fc, a.attempt, c
        if old is not None and old.node == fc.node:
            old.fail("MOVED")
        elif old is not None:
            # Another node served the claim: it learns that it no longer
            # leads (once it wakes, if it stalled) and ends its sessions.
            old.claim = None
            self._when_awake(old.node, lambda: old.end("close", error_frame("NOT_LEADER", fc.node)))
        if c.token:
            answer("ACQUIRED")
            fc.send(self._acquired(c, push=False, with_cred=True))
            return
        answer("WAITING")
        fc.send(self._waiting(c, with_cred=True))
        self._promote(c.name)  # a pending waiter that came back may be the head

    # What a test does to the cluster.

    def _tell(self, code: str, msg: str, how: str) -> None:
        """Ends every connection of the leader: the claims of version 3 with
        a credential are kept, pending, and their connections told code
        (how "close"), or end with no ERROR ("die"); the others are told
        SHUTDOWN and end."""
        ended: List[FakeClaim] = []
        for fc in list(self.conns):
            if fc.node != self.leader:
                continue
            c = fc.claim
            kept = c is not None and c.cred and c.conn is fc
            if kept:
                assert c is not None
                c.conn = None
            elif c is not None and c.conn is fc:
                ended.append(c)
            fc.claim = None
            if how == "die":
                fc.end("die")
            elif kept:
                fc.end("close", error_frame(code, msg))
            else:
                fc.end("close", error_frame("SHUTDOWN", "bye"))
        for c in ended:
            self.end(c)

    def handover(self, to: str) -> None:
        """A planned handover of the leader to node to: the claims of version
        3 are told NOT_LEADER naming it and wait there, pending."""
        with self.mu:
            self._tell("NOT_LEADER", to, "close")
            self.leader = to

    def shutdown(self) -> None:
        """A standalone server's planned stop and restart: SHUTDOWN to every
        session; the claims of version 3 wait for its next start, pending."""
        with self.mu:
            self._tell("SHUTDOWN", "bye", "close")

    def crash(self, to: str = "") -> None:
        """The leader's process dies: every connection of it ends with no
        ERROR; its successor (to, or the same node restarted) takes back the
        claims of version 3 (here: they stay, pending)."""
        with self.mu:
            self._tell("", "", "die")
            if to:
                self.leader = to

    def freeze(self, node: str = "") -> None:
        """node (the leader by default) answers nothing until unfreeze (its
        host stalls); what it reads meanwhile it answers then, in order."""
        with self.mu:
            self.frozen = self.frozen + [node or self.leader]

    def unfreeze(self) -> None:
        with self.mu:
            self.frozen = []
            later, self.later = self.later, []
        for f in later:
            f()

    def _when_awake(self, node: str, f: Callable[[], None]) -> None:
        """Runs f now, or when node is no longer frozen. f.mu must be held."""
        if node in self.frozen:
            self.later.append(f)
        else:
            f()

    def set_leader(self, node: str) -> None:
        with self.mu:
            self.leader = node

    def set_old(self, node: str, old: bool = True) -> None:
        """Makes node one of an older version: it answers VERSION to 3."""
        with self.mu:
            self.old[node] = old

    def new_generation(self) -> None:
        with self.mu:
            self.gen += 1

    def reset_holder(self, name: str) -> None:
        """Resets the connection of the first holder of name: a reset by a
        middlebox reaches both ends, and the server takes it for the
        client's release."""
        with self.mu:
            holders, _ = self.names[name.encode()]
            c = holders[0]
            fc = c.conn
            assert fc is not None, f"no connected holder of {name}"
            fc.claim = None
            self.end(c)
            fc.end("reset")

    def holders(self, name: str) -> List[Tuple[int, bool]]:
        """The tokens that hold name, and whether each has a connection."""
        with self.mu:
            entry = self.names.get(name.encode())
            return [(h.token, h.conn is not None) for h in entry[0]] if entry else []

    def queued(self, name: str) -> List[int]:
        """The tickets that wait for name, in order."""
        with self.mu:
            entry = self.names.get(name.encode())
            return [c.ticket for c in entry[1]] if entry else []

    def resumes_seen(self) -> List[Tuple[str, int, bool, str]]:
        with self.mu:
            return list(self.resumes)

    def conns_open(self, node: str) -> int:
        with self.mu:
            return sum(1 for fc in self.conns if fc.node == node)


# The scripted server.


class Peer:
    """One connection accepted by a Scripted server, played by the test."""

    def __init__(self, addr: str, sock: socket.socket) -> None:
        self.addr, self.sock = addr, sock
        self.frames: "queue.Queue[Optional[Tuple[int, bytes]]]" = queue.Queue()
        self.closed_how = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                fr = read_frame(self.sock)
            except OSError:
                fr = None
            if fr is None:
                self.frames.put(None)
                return
            self.frames.put(fr)

    def next(self, want: Optional[int] = None, timeout: float = 10.0) -> Tuple[int, bytes]:
        """The next frame the client sent (of type want)."""
        try:
            fr = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.addr}: no frame from the client within {timeout}s") from None
        if fr is None:
            self.frames.put(None)
            raise AssertionError(f"{self.addr}: the client closed the connection, want a frame")
        if want is not None and fr[0] != want:
            raise AssertionError(f"{self.addr}: frame 0x{fr[0]:02x} from the client, want 0x{want:02x}")
        return fr

    def acquire(self, timeout: float = 10.0) -> Acquire:
        _, p = self.next(wire.T_ACQUIRE, timeout)
        return decode_acquire(p)

    def closed(self, timeout: float = 10.0) -> List[Tuple[int, bytes]]:
        """Waits for the client to close the connection; the frames it sent
        before."""
        sent: List[Tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                fr = self.frames.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise AssertionError(f"{self.addr}: the client did not close the connection within {timeout}s") from None
            if fr is None:
                self.frames.put(None)
                return sent
            sent.append(fr)

    def quiet(self, seconds: float) -> bool:
        """True if the client sent nothing and kept the connection open for
        seconds."""
        try:
            fr = self.frames.get(timeout=seconds)
        except queue.Empty:
            return True
        self.frames.put(fr)
        return False

    def drop(self, ftype: int) -> int:
        """Takes the frames of type ftype already read off the queue (the
        others stay, in order); how many there were."""
        kept: List[Optional[Tuple[int, bytes]]] = []
        n = 0
        while True:
            try:
                fr = self.frames.get_nowait()
            except queue.Empty:
                break
            if fr is not None and fr[0] == ftype:
                n += 1
            else:
                kept.append(fr)
        for fr in kept:
            self.frames.put(fr)
        return n

    def send(self, b: bytes) -> None:
        self.sock.sendall(b)

    def fail(self, code: "str | int", msg: str = "") -> None:
        """An ERROR (a code's name, or its number), then a FIN (the server
        half-closes, as a real one does)."""
        num = CODES[code] if isinstance(code, str) else code
        self.send(frame(wire.T_ERROR, bytes([num]) + msg.encode()))
        self.sock.shutdown(socket.SHUT_WR)

    def eof(self) -> None:
        """The end of the stream with no ERROR: the server's process died."""
        self.sock.shutdown(socket.SHUT_RDWR)

    def reset(self) -> None:
        reset(self.sock)
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        self.sock.close()


class Scripted:
    """n listeners whose connections the test plays (accept)."""

    def __init__(self, n: int = 1, ctx: Optional[ssl.SSLContext] = None) -> None:
        self._q: "queue.Queue[Peer]" = queue.Queue()
        self.listeners = [_Listener(self._on_conn, ctx) for _ in range(n)]
        self.addrs = [ln.addr for ln in self.listeners]
        self.peers: List[Peer] = []

    def _on_conn(self, addr: str, sock: socket.socket) -> None:
        p = Peer(addr, sock)
        self.peers.append(p)
        self._q.put(p)

    def accept(self, timeout: float = 10.0) -> Peer:
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no connection from the client within {timeout}s") from None

    def no_accept(self, seconds: float) -> bool:
        try:
            p = self._q.get(timeout=seconds)
        except queue.Empty:
            return True
        self._q.put(p)
        return False

    def close(self) -> None:
        for ln in self.listeners:
            ln.close()
        for p in self.peers:
            try:
                p.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            p.sock.close()
