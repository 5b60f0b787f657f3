// Compiled by tsc (test/tsconfig.json) before it runs: the public types of
// resume (protocol version 3) say what the docs say.
import { test } from "node:test";
import assert from "node:assert/strict";
import { BadCredentialError, Client, MovedError, ResumeRefusedError, ServerError, SupersededError, isRetryable, type AcquireOptions, type ClientOptions, type Held, type Logger } from "baton-client";
import { startServer } from "../helpers.mjs";

test("resume, typed", async () => {
  const srv = await startServer();
  try {
    const logger: Logger = { error: (message: string, fields?: Record<string, unknown>) => void [message, fields] };
    const opts: ClientOptions = { leaseMs: 2000, resume: true, logger };
    const client = new Client([srv.addr], opts);
    const once: AcquireOptions = { resume: false };
    await using moving: Held = await client.acquire("ts/typed-v3");
    await using fixed: Held = await client.acquire("ts/typed-v2", once);
    assert.ok(moving.token > 0n && fixed.token > moving.token);
    const errors: Array<[ServerError, number, boolean]> = [
      [new ResumeRefusedError("claim ended"), 0x14, true],
      [new SupersededError(), 0x15, true],
      [new MovedError(), 0x16, false],
      [new BadCredentialError(), 0x25, false],
    ];
    for (const [e, code, retry] of errors) assert.deepEqual([e.code, isRetryable(e)], [code, retry], e.name);
  } finally {
    await srv.stop();
  }
});
