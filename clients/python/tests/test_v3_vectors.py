"""Protocol version 3 in the shared wire vectors
(clients/go/wire/testdata/vectors.json, section version_3): the client's
codec both ways, and the fake server of the client's move tests
(fakev3.py) playing every refusal and conversation, as a server's
conformance test does: the fake is a server of the spec, not one made to
fit the client."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import unittest
from typing import Dict, Optional

from fakev3 import NAMES, FakeCluster, acquired_frame, credential, credential_message, decode_acquire, read_frame, waiting_frame
from support import REPO

import baton
from baton import wire


def load() -> dict:
    with open(os.path.join(REPO, "clients", "go", "wire", "testdata", "vectors.json"), encoding="utf-8") as f:
        v = json.load(f)["version_3"]
    assert v["frames"] and v["scenarios"], "vectors.json has no version 3 frames or scenarios"
    return v


V3 = load()


def resume_of(r: Optional[dict]) -> Optional[wire.Resume]:
    if r is None:
        return None
    return wire.Resume(r["held"], int(r["id"]), r["generation"], r["attempt"],
                       wire.Credential(bytes.fromhex(r["credential"])))


class TestFrames(unittest.TestCase):
    """Every frame of the version_3 vectors, both ways: the client encodes
    the ACQUIREs (new claims and resumes) from their fields, and decodes the
    ACQUIRED, WAITING and ERROR frames to them, credentials intact."""

    def test_frames(self) -> None:
        kinds = set()
        for f in V3["frames"]:
            fields = f["fields"]
            kinds.add(f["type"])
            with self.subTest(f["what"]):
                raw = bytes.fromhex(f["hex"])
                if f["type"] == "ACQUIRE":
                    got = wire.encode_acquire_v3(fields["name"], fields["lease_ms"], fields["owner"], fields["nowait"],
                                                 shared=fields["shared"], limit=fields["limit"],
                                                 resume=resume_of(fields.get("resume")))
                    self.assertEqual(got.hex(), f["hex"])
                    a = decode_acquire(raw[3:])  # and the fake server reads it back
                    self.assertEqual((a.version, a.nowait, a.shared, a.lease_ms, a.limit, a.name.decode(), a.owner.decode()),
                                     (3, fields["nowait"], fields["shared"], fields["lease_ms"], fields["limit"],
                                      fields["name"], fields["owner"]))
                    r = fields.get("resume")
                    self.assertEqual(a.resuming, r is not None)
                    if r is not None:
                        self.assertEqual((a.held, a.resume_id, a.generation, a.attempt, a.credential.hex()),
                                         (r["held"], int(r["id"]), r["generation"], r["attempt"], r["credential"]))
                    continue
                frames, err = wire.split(bytearray(raw))
                self.assertIsNone(err)
                self.assertEqual(len(frames), 1)
                fr = wire.decode(*frames[0], v3=True)
                cred = fr.credential.raw.hex() if fr.credential is not None else ""
                if f["type"] == "ACQUIRED":
                    self.assertEqual((fr.push, fr.token, fr.generation, cred),
                                     (fields["push"], int(fields["token"]), fields["generation"], fields["credential"]))
                    self.assertEqual(acquired_frame(fr.token, fr.generation, bytes.fromhex(cred), fr.push).hex(), f["hex"])
                elif f["type"] == "WAITING":
                    self.assertEqual((fr.position, fr.ticket, fr.generation, cred),
                                     (fields["position"], int(fields["ticket"]), fields["generation"], fields["credential"]))
                    self.assertEqual(waiting_frame(fr.position, fr.ticket, fr.generation, bytes.fromhex(cred)).hex(),
                                     f["hex"])
                else:
                    self.assertEqual((fr.code, fr.message), (fields["code"], fields["message"]))
                    e = baton.errors.error_for_code(fr.code, fr.message)
                    self.assertEqual(baton.errors.code_name(e.code), fields["code_name"])
                    self.assertNotEqual(type(e), baton.ServerError, f"no class for {fields['code_name']}")
        self.assertEqual(kinds, {"ACQUIRE", "ACQUIRED", "WAITING", "ERROR"})

    def test_credential_bytes_intact_and_redacted(self) -> None:
        """The credential of a frame is its 16 bytes, whatever they are, and
        prints redacted everywhere (repr, str, the frame's repr)."""
        for raw in (bytes(16), b"\xff" * 16, bytes(range(16)), bytes.fromhex("68ed1cf56c6decb4aae3230bcc9f04d5")):
            fr = wire.decode(wire.T_ACQUIRED, bytes([wire.FLAG_CREDENTIAL]) + (7).to_bytes(8, "big") + (1).to_bytes(4, "big") + raw, v3=True)
            assert fr.credential is not None
            self.assertEqual(fr.credential.raw, raw)
            for text in (repr(fr.credential), str(fr.credential), repr(fr), f"{fr.credential}"):
                self.assertNotIn(raw.hex(), text)
                self.assertIn("redacted", text)
            r = wire.Resume(True, 7, 1, 1, fr.credential)
            self.assertNotIn(raw.hex(), repr(r))
            self.assertIn(raw, wire.encode_acquire_v3("jobs", 10000, resume=r))


class TestRefusals(unittest.TestCase):
    def test_bad_acquire_refused_before_dialling(self) -> None:
        """The client's encoder refuses what a server would refuse."""
        for b in V3["bad_acquire"]:
            with self.subTest(b["what"]):
                with self.assertRaises(baton.BadRequest):
                    wire.encode_acquire_v3(b["name"], b["lease_ms"], b["owner"], b.get("nowait", False),
                                           shared=b["shared"], limit=b["limit"], resume=resume_of(b.get("resume")))

    def test_bad_server_frames(self) -> None:
        """Frames of a version 3 session that no server may send: the client
        refuses them (a protocol violation)."""
        cred = bytes(16)
        for what, ftype, p in [
            ("ACQUIRED of 29 bytes without CREDENTIAL", wire.T_ACQUIRED, bytes([0]) + (7).to_bytes(8, "big") + (1).to_bytes(4, "big") + cred),
            ("ACQUIRED of 9 bytes with CREDENTIAL", wire.T_ACQUIRED, bytes([wire.FLAG_CREDENTIAL]) + (7).to_bytes(8, "big")),
            ("ACQUIRED with a credential of generation 0", wire.T_ACQUIRED, bytes([wire.FLAG_CREDENTIAL]) + (7).to_bytes(8, "big") + bytes(4) + cred),
            ("ACQUIRED with token 0", wire.T_ACQUIRED, bytes([wire.FLAG_CREDENTIAL]) + bytes(8) + (1).to_bytes(4, "big") + cred),
            ("ACQUIRED of 20 bytes", wire.T_ACQUIRED, bytes(20)),
            ("WAITING of 33 bytes without TICKET", wire.T_WAITING, bytes([0]) + (2).to_bytes(4, "big") + (9).to_bytes(8, "big") + (1).to_bytes(4, "big") + cred),
            ("WAITING of 5 bytes with TICKET", wire.T_WAITING, bytes([wire.FLAG_TICKET]) + (2).to_bytes(4, "big")),
            ("WAITING with ticket 0", wire.T_WAITING, bytes([wire.FLAG_TICKET]) + (2).to_bytes(4, "big") + bytes(8) + (1).to_bytes(4, "big") + cred),
            ("WAITING with a credential of generation 0", wire.T_WAITING, bytes([wire.FLAG_TICKET]) + (2).to_bytes(4, "big") + (9).to_bytes(8, "big") + bytes(4) + cred),
        ]:
            with self.subTest(what):
                with self.assertRaises(baton.ProtocolError):
                    wire.decode(ftype, p, v3=True)
        # A session of version 1 or 2 never sees either flag's frame.
        with self.assertRaises(baton.ProtocolError):
            wire.decode(wire.T_ACQUIRED, bytes.fromhex("0200000300000000070000000168ed1cf56c6decb4aae3230bcc9f04d5"))

    def test_error_codes(self) -> None:
        for c in V3["error_codes"]:
            with self.subTest(c["name"]):
                e = baton.errors.error_for_code(c["code"])
                self.assertEqual((e.code, baton.errors.code_name(e.code)), (c["code"], c["name"]))
                self.assertEqual(e.client_error, c["class"] == "client")
                self.assertEqual(0x10 <= e.code <= 0x1F, c["class"] == "session")
                self.assertIsInstance(e, {"RESUME_REFUSED": baton.ResumeRefused, "SUPERSEDED": baton.Superseded,
                                          "MOVED": baton.Moved, "BAD_CREDENTIAL": baton.BadCredential}[c["name"]])
        self.assertTrue(baton.is_retryable(baton.ResumeRefused()))
        for e in (baton.Superseded(), baton.Moved(), baton.BadCredential(),
                  baton.LockLost("a", baton.Superseded()), baton.LockLost("a", baton.Moved())):
            self.assertFalse(baton.is_retryable(e), repr(e))


class TestFakeServer(unittest.TestCase):
    """The fake server of the move tests against the vectors."""

    def test_credentials(self) -> None:
        for c in V3["credentials"]:
            with self.subTest(c["what"]):
                client_key = bytes.fromhex(c["client_key"])
                if "client_spki" in c:
                    self.assertEqual(hashlib.sha256(bytes.fromhex(c["client_spki"])).digest(), client_key)
                args = (c["role"], c["generation"], c["shared"], c["limit"], c["lease_ms"], int(c["id"]), c["name"].encode())
                self.assertEqual(credential_message(*args, cluster_id=c["cluster_id"], client_key=client_key).hex(),
                                 c["message"])
                self.assertEqual(credential(*args, cluster_id=c["cluster_id"], key=bytes.fromhex(c["key"]),
                                            client_key=client_key).hex(), c["credential"])

    def test_bad_frames(self) -> None:
        for b in V3["bad_frames"]:
            with self.subTest(b["what"]):
                f = FakeCluster()
                self.addCleanup(f.close)
                addr = f.listen()
                with socket.create_connection(addr.rsplit(":", 1)) as c:  # type: ignore[arg-type]
                    c.settimeout(10)
                    if not b["first"]:
                        c.sendall(bytes.fromhex("01000d0300000007d00001046a6f6273"))
                        self.assertIsNotNone(read_frame(c))
                    c.sendall(bytes.fromhex(b["hex"]))
                    fr = read_frame(c)
                    assert fr is not None
                    self.assertEqual((fr[0], NAMES.get(fr[1][0])), (wire.T_ERROR, b["error"]))

    def test_scenarios(self) -> None:
        placeholder = re.compile(r"\{([a-z0-9_]+)\}")
        for sc in V3["scenarios"]:
            with self.subTest(sc["what"]):
                f = FakeCluster()
                self.addCleanup(f.close)
                host, port = f.listen().rsplit(":", 1)
                conns: Dict[int, socket.socket] = {}
                saved: Dict[str, str] = {}

                def conn(i: int) -> socket.socket:
                    if i not in conns:
                        c = socket.create_connection((host, int(port)))
                        c.settimeout(10)
                        self.addCleanup(c.close)
                        conns[i] = c
                    return conns[i]

                def fill(s: str) -> str:
                    return placeholder.sub(lambda m: saved[m.group(1)], s)

                for i, st in enumerate(sc["steps"]):
                    if st.get("new_generation"):
                        f.new_generation()
                    elif "send" in st:
                        conn(st["conn"]).sendall(bytes.fromhex(fill(st["send"])))
                    elif st.get("close"):
                        conn(st["conn"]).close()
                    elif "expect" in st:
                        fr = read_frame(conn(st["conn"]))
                        self.assertIsNotNone(fr, f"step {i}: the end of the stream, want {st['expect']}")
                        assert fr is not None
                        got = (bytes([fr[0]]) + len(fr[1]).to_bytes(2, "big") + fr[1]).hex()
                        want = fill(st["expect"]).lower()
                        ok = len(got) == len(want) and all(w in (".", g) for w, g in zip(want, got))
                        self.assertTrue(ok, f"step {i}: got {got}, want {want}")
                        for name, (off, n) in st.get("save", {}).items():
                            saved[name] = bytes.fromhex(got)[off:off + n].hex()
                    elif "expect_error" in st:
                        fr = read_frame(conn(st["conn"]))
                        assert fr is not None, f"step {i}: the end of the stream, want ERROR {st['expect_error']}"
                        self.assertEqual((fr[0], NAMES.get(fr[1][0])), (wire.T_ERROR, st["expect_error"]), f"step {i}")
                    elif st.get("expect_closed"):
                        self.assertIsNone(read_frame(conn(st["conn"])), f"step {i}: want the end of the stream")


if __name__ == "__main__":
    unittest.main()
