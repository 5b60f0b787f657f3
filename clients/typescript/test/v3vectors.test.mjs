// Protocol version 3 (docs/protocol.md section 14): every version_3 vector
// of the shared file through the client's codec, both ways; the refusals;
// the credential vectors, which a client never computes but must carry
// intact (here they also check the fake server of resume.test.mjs); and
// every conversation, played at the codec: what the client decodes from
// the server's frames, it sends back byte for byte.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { inspect } from "node:util";
import * as baton from "baton-client";
import * as wire from "../dist/wire.js";
import { REPO } from "./helpers.mjs";
import { credential, parseAcquire } from "./fakev3.mjs";

const v3 = JSON.parse(readFileSync(join(REPO, "clients", "go", "wire", "testdata", "vectors.json"), "utf8")).version_3;
const one = (hex, isV3 = true) => {
  const { frames, rest, error } = wire.split(Buffer.from(hex, "hex"));
  assert.equal(error, undefined);
  assert.equal(rest.length, 0);
  assert.equal(frames.length, 1);
  return wire.decode(...frames[0], isV3);
};
const cred = (hex) => new wire.Credential(Buffer.from(hex, "hex"));
const resumeOf = (r) => r && { held: r.held, id: BigInt(r.id), generation: r.generation, attempt: r.attempt, credential: cred(r.credential) };

describe("the version 3 vectors", () => {
  test("frames both ways", () => {
    const seen = new Set();
    for (const f of v3.frames) {
      const x = f.fields;
      seen.add(f.type);
      if (f.type === "ACQUIRE") {
        assert.equal(x.version, 3, f.what);
        const got = wire.encodeAcquireV3(x.name, x.lease_ms, x.owner, x.nowait, { shared: x.shared, limit: x.limit }, resumeOf(x.resume));
        assert.equal(got.toString("hex"), f.hex, f.what);
        continue;
      }
      const d = one(f.hex);
      if (f.type === "ACQUIRED") {
        assert.deepEqual([d.push, d.token, d.generation], [x.push, BigInt(x.token), x.generation], f.what);
        assert.equal(d.credential?.bytes().toString("hex") ?? "", x.credential, f.what);
        if (x.credential) assert.throws(() => one(f.hex, false), baton.ProtocolError, `${f.what}: a session of version 1 or 2 never takes it`);
      } else if (f.type === "WAITING") {
        assert.deepEqual([d.position, d.ticket, d.generation], [x.position, BigInt(x.ticket), x.generation], f.what);
        assert.equal(d.credential?.bytes().toString("hex") ?? "", x.credential, f.what);
        if (x.credential) assert.throws(() => one(f.hex, false), baton.ProtocolError, `${f.what}: a session of version 1 or 2 never takes it`);
      } else {
        assert.equal(f.type, "ERROR", f.what);
        assert.deepEqual([d.code, d.message], [x.code, x.message], f.what);
        assert.equal(baton.codeName(d.code), x.code_name);
        assert.equal(baton.errorForCode(d.code).constructor.name, { RESUME_REFUSED: "ResumeRefusedError", SUPERSEDED: "SupersededError", MOVED: "MovedError", BAD_CREDENTIAL: "BadCredentialError" }[x.code_name]);
      }
    }
    assert.deepEqual([...seen].sort(), ["ACQUIRE", "ACQUIRED", "ERROR", "WAITING"]);
  });

  test("frames a version 3 session refuses", () => {
    const bad = [
      ["ACQUIRED of 29 bytes without CREDENTIAL", "82001d0000000300000000070000000168ed1cf56c6decb4aae3230bcc9f04d5"],
      ["ACQUIRED of 9 bytes with CREDENTIAL", "820009020000030000000007"],
      ["ACQUIRED with a credential of generation 0", "82001d0200000300000000070000000068ed1cf56c6decb4aae3230bcc9f04d5"],
      ["WAITING of 33 bytes without TICKET", "8100210000000002000003000000000900000001eba34481e394b269f4606e86f8c5f9dc"],
      ["WAITING of 5 bytes with TICKET", "8100050100000002"],
      ["WAITING with ticket 0", "8100210100000002000000000000000000000001eba34481e394b269f4606e86f8c5f9dc"],
      ["WAITING with a credential of generation 0", "8100210100000002000003000000000900000000eba34481e394b269f4606e86f8c5f9dc"],
      ["ACQUIRED of 20 bytes", "8200140200000300000000070000000101020304050607"],
    ];
    for (const [what, hex] of bad) assert.throws(() => one(hex), baton.ProtocolError, what);
  });

  test("ACQUIREs refused before dialling", async () => {
    for (const b of v3.bad_acquire) {
      assert.throws(() => wire.encodeAcquireV3(b.name, b.lease_ms, b.owner, b.nowait ?? false, { shared: b.shared, limit: b.limit }, resumeOf(b.resume)), baton.BadRequestError, b.what);
      // The frame, had a client sent it, is what the server refuses the same way.
      assert.equal(parseAcquire(Buffer.from(b.hex, "hex").subarray(3)).error, b.error, b.what);
    }
  });

  test("first frames a server refuses: the fake server of these tests refuses them as the spec says", () => {
    // The fake server checks every frame the client sends with this
    // reading of section 14's table; a frame it refuses fails a test.
    for (const b of v3.bad_frames.filter((b) => b.first)) {
      assert.equal(parseAcquire(Buffer.from(b.hex, "hex").subarray(3)).error, b.error, b.what);
    }
    for (const b of v3.bad_frames.filter((b) => !b.first)) {
      assert.equal(parseAcquire(Buffer.from(b.hex, "hex").subarray(3)).error, undefined, `${b.what}: valid as a first frame`);
    }
  });

  test("error codes and classes", () => {
    for (const c of v3.error_codes) {
      const e = baton.errorForCode(c.code);
      assert.equal(baton.codeName(c.code), c.name);
      assert.notEqual(e.constructor, baton.ServerError, `no class for ${c.name}`);
      assert.equal(e.clientError, c.class === "client", c.name);
      assert.equal(e.serverCondition, false, c.name);
    }
    const retry = (e) => baton.isRetryable(e) && baton.isRetryable(new baton.LockLost("a", e));
    assert.equal(retry(new baton.ResumeRefusedError()), true, "a claim that could not move: a new claim may be granted");
    assert.equal(retry(new baton.SupersededError()), true);
    assert.equal(baton.isRetryable(new baton.MovedError()), false, "another connection took the claim with its credential");
    assert.equal(baton.isRetryable(new baton.BadCredentialError()), false, "a client error");
  });

  test("credentials: the fake server computes them as the spec does", () => {
    for (const c of v3.credentials) {
      const got = credential({ key: Buffer.from(c.key, "hex"), clusterId: c.cluster_id, role: c.role, generation: c.generation, shared: c.shared,
        limit: c.limit, leaseMs: c.lease_ms, id: BigInt(c.id), clientKey: Buffer.from(c.client_key, "hex"), name: c.name });
      assert.equal(got.message.toString("hex"), c.message, c.what);
      assert.equal(got.credential.toString("hex"), c.credential, c.what);
    }
  });

  test("a credential carries its bytes intact and shows none of them", () => {
    const hex = "68ed1cf56c6decb4aae3230bcc9f04d5";
    const c = one("82001d0200000300000000070000000168ed1cf56c6decb4aae3230bcc9f04d5").credential;
    assert.equal(c.bytes().toString("hex"), hex);
    c.bytes().fill(0); // a copy: the credential keeps its bytes
    assert.equal(c.bytes().toString("hex"), hex);
    for (const shown of [String(c), `${c}`, JSON.stringify({ c }), inspect(c), inspect({ c }, { showHidden: true, depth: Infinity }), inspect(c, { customInspect: false, showHidden: true })]) {
      assert.doesNotMatch(shown, /68ed|68 ed|aOH0|h\u00ed/i, shown);
      assert.match(shown, /redacted|Credential \{\}/, shown);
    }
  });

  test("the conversations, at the codec: what the client reads it sends back byte for byte", () => {
    for (const s of v3.scenarios) {
      const saved = {}; // name -> hex, as the client decoded it
      const decoded = {}; // name -> what the client's decoder made of it
      let fill = 0;
      const sub = (hex) => hex.replace(/\{(\w+)\}/g, (_, k) => {
        assert.ok(k in saved, `${s.what}: {${k}} used before it is saved`);
        return saved[k];
      });
      for (const st of s.steps) {
        if (st.new_generation || st.close || st.expect_closed) continue;
        if (st.send) {
          const bytes = Buffer.from(sub(st.send), "hex");
          if (bytes[0] === 0x02) {
            assert.equal(bytes.toString("hex"), wire.HEARTBEAT.toString("hex"), s.what);
            continue;
          }
          const a = parseAcquire(bytes.subarray(3));
          assert.equal(a.error, undefined, `${s.what}: ${st.send}`);
          let got;
          if (a.version === 3) {
            // The resume block from what the client decoded: its token or
            // ticket, generation and credential objects, not the hex.
            const r = a.resume && {
              held: a.held, id: a.id, generation: a.generation, attempt: a.attempt,
              credential: Object.values(decoded).find((d) => d.credential?.bytes().equals(a.credential))?.credential ?? new wire.Credential(a.credential),
            };
            got = wire.encodeAcquireV3(a.name, a.leaseMs, a.owner, a.nowait, { shared: a.shared, limit: a.limit }, r);
          } else {
            got = wire.encodeAcquire(a.name, a.leaseMs, a.owner, a.nowait, a.version === 2 ? { shared: a.shared, limit: a.limit } : undefined);
          }
          assert.equal(got.toString("hex"), bytes.toString("hex"), `${s.what}: ${st.send}`);
          continue;
        }
        if (st.expect_error) {
          const d = one(errorHex(st.expect_error));
          assert.equal(baton.codeName(d.code), st.expect_error, s.what);
          continue;
        }
        // A frame the server sends: its wildcards filled with bytes that
        // are never 0, then decoded as the client decodes it.
        const hex = sub(st.expect).replace(/\.\./g, () => ((fill++ % 254) + 1).toString(16).padStart(2, "0"));
        const d = one(hex);
        for (const [k, [off, len]] of Object.entries(st.save ?? {})) {
          saved[k] = hex.slice(2 * off, 2 * (off + len));
          const field = Buffer.from(saved[k], "hex");
          decoded[k] = d;
          if (len === 16) assert.ok(d.credential?.bytes().equals(field), `${s.what}: ${k}, the credential at ${off}`);
          else if (len === 4) assert.equal(d.generation, field.readUInt32BE(0), `${s.what}: ${k}, the generation at ${off}`);
          else assert.equal(d.type === 0x81 ? d.ticket : d.token, field.readBigUInt64BE(0), `${s.what}: ${k}, the id at ${off}`);
        }
      }
    }
  });
});

function errorHex(name) {
  const code = { BUSY: 0x13, RESUME_REFUSED: 0x14, MOVED: 0x16, BAD_CREDENTIAL: 0x25 }[name];
  assert.ok(code, `an error this test does not know: ${name}`);
  return `800001${code.toString(16).padStart(2, "0")}`;
}
