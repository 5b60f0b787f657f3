import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import * as baton from "baton-client";
import { startServer } from "./helpers.mjs";

// A fake follower: answers every connection's first frame with ERROR
// NOT_LEADER carrying hint, and counts the connections.
async function follower(hint) {
  const f = { accepted: 0 };
  f.server = net.createServer((c) => {
    f.accepted++;
    c.once("data", () => {
      const msg = Buffer.from(hint);
      const frame = Buffer.alloc(4 + msg.length);
      frame[0] = 0x80;
      frame.writeUInt16BE(1 + msg.length, 1);
      frame[3] = 0x03;
      msg.copy(frame, 4);
      c.end(frame);
    });
    c.on("error", () => {});
  });
  await new Promise((r) => f.server.listen(0, "127.0.0.1", r));
  f.addr = `127.0.0.1:${f.server.address().port}`;
  return f;
}

describe("NOT_LEADER", () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(async () => { await srv.stop(); });

  test("the hint is followed when it is on the list", async () => {
    const f = await follower(srv.addr);
    try {
      const c = new baton.Client([f.addr, srv.addr], { leaseMs: 2000 });
      const held = await c.acquire("ts/leader", { signal: AbortSignal.timeout(10_000) });
      assert.ok(held.token > 0n);
      await held.release();
      assert.equal(f.accepted, 1);
    } finally {
      f.server.close();
    }
  });

  test("a hint off the list is not followed: rotation", async () => {
    const f = await follower("203.0.113.9:7070");
    try {
      const c = new baton.Client([f.addr, srv.addr], { leaseMs: 2000 });
      const held = await c.acquire("ts/leader2", { signal: AbortSignal.timeout(10_000) });
      await held.release();
    } finally {
      f.server.close();
    }
  });

  test("only followers: backs off, never spins", async () => {
    const f = await follower("");
    try {
      const c = new baton.Client([f.addr], { leaseMs: 2000 });
      await assert.rejects(c.acquire("ts/leader3", { signal: AbortSignal.timeout(1000) }), (e) => e.name === "TimeoutError");
      assert.ok(f.accepted < 40, `${f.accepted} connections in 1 s`);
    } finally {
      f.server.close();
    }
  });
});
