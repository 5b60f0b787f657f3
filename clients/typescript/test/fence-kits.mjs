// The fencing kits' guarded counter, "n writer", for fence.test.mjs and its
// holder process: one kit per resource, fenced or not, each with begin
// (the fence's check, then the read) and write (of n by writer), through
// the real drivers (pg, node-redis) and fetch.
import pg from "pg";
import { createClient } from "redis";
import * as baton from "baton-client";

export const MARK = "{fenced/counter}:mark";
export const DATA = "{fenced/counter}:data";

export function parse(v) {
  const [n, w = ""] = (v ?? "0 ").trim().split(" ");
  return [Number(n || 0), w];
}

// PostgreSQL: two transactions, each begun with baton_fence: one reads, one writes.
class Postgres {
  constructor(fenced) {
    this.fenced = fenced;
    this.client = new pg.Client({ connectionString: process.env.BATON_TEST_POSTGRES_URL });
  }
  async open() { await this.client.connect(); return this; }
  async tx(held, sql, values = []) {
    await this.client.query("BEGIN");
    try {
      if (this.fenced) await baton.fencePostgres(this.client, held);
      const r = await this.client.query(sql, values);
      await this.client.query("COMMIT");
      return r;
    } catch (e) {
      await this.client.query("ROLLBACK");
      throw e;
    }
  }
  async begin(held) { return (await this.tx(held, "SELECT n FROM counter")).rows[0].n; }
  async write(held, n, writer) { await this.tx(held, "UPDATE counter SET n = $1, writer = $2", [n, writer]); }
  async close() { await this.client.end(); }
}

class Redis {
  constructor(fenced) {
    this.fenced = fenced;
    this.client = createClient({ url: `redis://${process.env.BATON_TEST_REDIS}` });
    this.send = (args) => this.client.sendCommand(args);
  }
  async open() { await this.client.connect(); return this; }
  async begin(held) {
    if (this.fenced) await baton.fenceRedis(this.send, MARK, held);
    return parse(await this.client.get(DATA))[0];
  }
  async write(held, n, writer) {
    if (this.fenced) await baton.fencedRedisSet(this.send, MARK, held, DATA, `${n} ${writer}`);
    else await this.client.set(DATA, `${n} ${writer}`);
  }
  async close() { this.client.destroy(); }
}

// HTTP: the counter service behind the Go middleware (fencedcounter).
class HTTP {
  constructor(fenced, url) { this.fenced = fenced; this.url = url; }
  async open() { return this; }
  async send(held, method, body) {
    const f = this.fenced ? baton.fencedFetch(held) : fetch;
    const r = await f(this.url, { method, body });
    const text = await r.text();
    if (r.status === 409) throw new baton.StaleToken(held.name, held.token, text);
    if (!r.ok) throw new Error(`${method} ${this.url}: ${r.status} ${text}`);
    return text;
  }
  async begin(held) { return parse(await this.send(held, "GET"))[0]; }
  async write(held, n, writer) { await this.send(held, "PUT", `${n} ${writer}`); }
  async close() {}
}

export function makeKit(kind, fenced, where) {
  if (kind === "postgres") return new Postgres(fenced).open();
  if (kind === "redis") return new Redis(fenced).open();
  return new HTTP(fenced, where).open();
}
