// A fake Baton cluster that speaks protocol version 3 (docs/protocol.md
// section 14), for the client's tests: one lock table shared by 1 to N
// nodes on loopback (node:net), one of which leads, with the spec's server
// rules for what a client can see: ACQUIRE checks (rows 6 to 13),
// credentials (HMAC-SHA256 with the test key of the vectors, checked
// against the vectors' credentials), tickets, attempt numbers, moves with
// MOVED on the old connection, generations and the fresh credential of the
// first heartbeat reply after one, and versions 1 and 2 beside. A client's
// close or reset of a claim's connection is its release.
//
// Hooks script what a test needs: a leader that ends its sessions with
// SHUTDOWN or NOT_LEADER (a planned handover: the table stays), a node that
// crashes with a FIN, a reset, or silence (the successor has the table, as
// one that took every claim back in its grace), a claim's connection that
// goes silent, resumes held unanswered and answered later in any order, a
// node of version 2. `events` records what the clients sent.
import { createHmac } from "node:crypto";
import * as net from "node:net";

export const TEST_KEY = Buffer.from([...Array(32).keys()]);
export const CLUSTER_ID = "0123456789abcdef";
export const CODES = { SHUTDOWN: 0x01, OVERLOADED: 0x02, NOT_LEADER: 0x03, BUSY: 0x13, RESUME_REFUSED: 0x14, SUPERSEDED: 0x15, MOVED: 0x16, PROTOCOL: 0x20, BAD_REQUEST: 0x21, VERSION: 0x22, BAD_CREDENTIAL: 0x25 };

/** The credential of section 14: the first 16 bytes of HMAC-SHA256 over the claim's message. */
export function credential({ key = TEST_KEY, clusterId = CLUSTER_ID, role, generation, shared, limit, leaseMs, id, clientKey = Buffer.alloc(0), name }) {
  const cid = Buffer.from(clusterId);
  const n = Buffer.from(name);
  const fixed = Buffer.alloc(4 + 1 + 2 + 4 + 8);
  fixed.writeUInt32BE(generation, 0);
  fixed[4] = shared ? 1 : 0;
  fixed.writeUInt16BE(limit, 5);
  fixed.writeUInt32BE(leaseMs, 7);
  fixed.writeBigUInt64BE(BigInt(id), 11);
  const msg = Buffer.concat([Buffer.from("baton v3 claim"), Buffer.from([role.charCodeAt(0), cid.length]), cid, fixed,
    Buffer.from([clientKey.length]), clientKey, Buffer.from([n.length]), n]);
  return { message: msg, credential: createHmac("sha256", key).update(msg).digest().subarray(0, 16) };
}

const err = (code, message) => ({ error: code, message });

function checkText(raw, min) {
  if (raw.length < min || raw.length > 255) return false;
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(raw);
  } catch {
    return false;
  }
  return !raw.some((b) => b < 0x20 || b === 0x7f);
}

/**
 * An ACQUIRE payload checked as a server of version `newest` does
 * (section 3 and section 14's table): the fields, or { error: name }.
 */
export function parseAcquire(p, newest = 3) {
  if (p.length === 0) return err("PROTOCOL", "empty");
  const v = p[0];
  if (v < 1 || v > newest) return err("VERSION", `version ${v}`);
  let fixed = v === 1 ? 7 : 9;
  if (p.length < fixed) return err("PROTOCOL", "short");
  const flags = p[1];
  const resume = v === 3 && (flags & 0x04) !== 0;
  if (resume) {
    fixed = 39;
    if (p.length < fixed) return err("PROTOCOL", "short resume");
  }
  const nameLen = p[fixed - 1];
  if (p.length < fixed + nameLen) return err("PROTOCOL", "short name");
  const known = v === 1 ? 0x01 : v === 2 ? 0x03 : 0x0f;
  if (flags & ~known) return err("BAD_REQUEST", "flags");
  const held = (flags & 0x08) !== 0;
  const nowait = (flags & 0x01) !== 0;
  const shared = (flags & 0x02) !== 0;
  if (held && !resume) return err("BAD_REQUEST", "HELD without RESUME");
  if (nowait && resume) return err("BAD_REQUEST", "NOWAIT with RESUME");
  const leaseMs = p.readUInt32BE(2);
  if (leaseMs === 0) return err("BAD_REQUEST", "lease 0");
  const limit = v === 1 ? 1 : p.readUInt16BE(6);
  if (limit === 0 || (limit > 1 && !shared)) return err("BAD_REQUEST", "limit");
  const a = { version: v, nowait, shared, resume, held, leaseMs, limit, name: p.subarray(fixed, fixed + nameLen), owner: p.subarray(fixed + nameLen) };
  if (resume) {
    a.id = p.readBigUInt64BE(8);
    a.generation = p.readUInt32BE(16);
    a.attempt = p.readUInt16BE(20);
    a.credential = Buffer.from(p.subarray(22, 38));
    if (a.id === 0n || a.generation === 0 || a.attempt === 0) return err("BAD_REQUEST", "resume block 0");
  }
  if (!checkText(a.name, 1) || !checkText(a.owner, 0)) return err("BAD_REQUEST", "name or owner");
  a.name = a.name.toString("utf8");
  a.owner = a.owner.toString("utf8");
  return a;
}

function frame(type, payload) {
  const b = Buffer.alloc(3 + payload.length);
  b[0] = type;
  b.writeUInt16BE(payload.length, 1);
  payload.copy(b, 3);
  return b;
}
export function errorFrame(code, message = "") {
  return frame(0x80, Buffer.concat([Buffer.from([CODES[code] ?? code]), Buffer.from(message)]));
}

/**
 * Starts a fake cluster of `nodes` nodes on 127.0.0.1:0; node 0 leads.
 * `speaks` (per node, default 3) is the newest version a node speaks;
 * `servers` (per node, default its index) says which server a node's
 * address reaches: two addresses of one server share its connections' fate
 * (a move from one to the other ends the old one with MOVED).
 */
export async function fakeCluster({ nodes = 1, speaks = [], servers = [], epoch = 3 } = {}) {
  const cl = new FakeCluster(epoch);
  for (let i = 0; i < nodes; i++) await cl.addNode(speaks[i] ?? 3, servers[i] ?? i);
  return cl;
}

class FakeCluster {
  constructor(epoch) {
    this.epoch = BigInt(epoch);
    this.nodes = [];
    this.leader = 0;
    this.generation = 1;
    this.seq = 0n;
    this.names = new Map(); // name -> { holders: [], waiters: [] }
    this.claims = new Map(); // "H:token" / "W:ticket" -> claim
    this.events = [];
    this.connSeq = 0;
    this.t0 = performance.now();
  }

  async addNode(speaks, server) {
    const node = { idx: this.nodes.length, serverId: server, speaks, conns: new Set(), holdResumes: false, held: [], mode: "serving" };
    node.server = net.createServer((sock) => this.accept(node, sock));
    await new Promise((r) => node.server.listen(0, "127.0.0.1", r));
    node.port = node.server.address().port;
    node.addr = `127.0.0.1:${node.port}`;
    this.nodes.push(node);
    return node;
  }

  get addrs() {
    return this.nodes.map((n) => n.addr);
  }

  event(e) {
    this.events.push({ at: performance.now(), ...e });
  }

  next() {
    return (this.epoch << 40n) | ++this.seq;
  }

  cred(claim, role, generation = this.generation) {
    const id = role === "H" ? claim.token : claim.ticket;
    return credential({ role, generation, shared: claim.shared, limit: claim.limit, leaseMs: claim.leaseMs, id, name: claim.name }).credential;
  }

  acquired(claim, { push = false, withCred = claim.credentialed } = {}) {
    if (!withCred) {
      const p = Buffer.alloc(9);
      p[0] = push ? 1 : 0;
      p.writeBigUInt64BE(claim.token, 1);
      return frame(0x82, p);
    }
    const p = Buffer.alloc(29);
    p[0] = 0x02 | (push ? 1 : 0);
    p.writeBigUInt64BE(claim.token, 1);
    p.writeUInt32BE(this.generation, 9);
    this.cred(claim, "H").copy(p, 13);
    claim.gen = this.generation;
    return frame(0x82, p);
  }

  waiting(claim, withCred = claim.credentialed) {
    const position = this.table(claim.name).waiters.indexOf(claim) + 1;
    if (!withCred) {
      const p = Buffer.alloc(5);
      p.writeUInt32BE(position, 1);
      return frame(0x81, p);
    }
    const p = Buffer.alloc(33);
    p[0] = 0x01;
    p.writeUInt32BE(position, 1);
    p.writeBigUInt64BE(claim.ticket, 5);
    p.writeUInt32BE(this.generation, 13);
    this.cred(claim, "W").copy(p, 17);
    claim.gen = this.generation;
    return frame(0x81, p);
  }

  table(name) {
    let t = this.names.get(name);
    if (!t) this.names.set(name, (t = { holders: [], waiters: [] }));
    return t;
  }

  canHold(claim) {
    const t = this.table(claim.name);
    if (t.holders.length === 0) return true;
    return claim.shared && t.holders.every((h) => h.shared) && t.holders.length < claim.limit;
  }

  accept(node, sock) {
    const fc = { id: ++this.connSeq, node, sock, buf: Buffer.alloc(0), first: true, stalled: false, queued: 0, done: false };
    node.conns.add(fc);
    sock.on("data", (d) => this.onData(fc, d));
    sock.on("end", () => this.onClientEnd(fc, "fin"));
    sock.on("error", (e) => this.onClientEnd(fc, e.code === "ECONNRESET" ? "reset" : e.code));
    sock.on("close", () => {
      node.conns.delete(fc);
      this.onClientEnd(fc, "close");
    });
  }

  send(fc, bytes) {
    if (!fc.done && !fc.sock.destroyed) fc.sock.write(bytes);
  }

  /** Ends a connection from the server's side as section 14 says: an ERROR, then the end of the stream. */
  endWith(fc, code, message = "") {
    if (fc.done) return;
    fc.done = true;
    fc.sock.end(errorFrame(code, message));
  }

  onData(fc, d) {
    if (fc.done || fc.node.mode === "silent") return;
    fc.buf = Buffer.concat([fc.buf, d]);
    while (fc.buf.length >= 3) {
      const len = fc.buf.readUInt16BE(1);
      if (fc.buf.length < 3 + len) return;
      const type = fc.buf[0];
      const p = fc.buf.subarray(3, 3 + len);
      fc.buf = fc.buf.subarray(3 + len);
      if (fc.first) {
        fc.first = false;
        if (type !== 0x01) return this.endWith(fc, "PROTOCOL");
        this.onAcquire(fc, Buffer.from(p));
      } else if (type === 0x02 && len === 0) {
        this.onHeartbeat(fc);
      } else {
        return this.endWith(fc, "PROTOCOL");
      }
      if (fc.done) return;
    }
  }

  onAcquire(fc, p) {
    const node = fc.node;
    const a = parseAcquire(p, node.speaks);
    this.event({ kind: a.resume ? "resume" : "acquire", node: node.idx, conn: fc.id, version: p[0], attempt: a.attempt, held: a.held, id: a.id, generation: a.generation, name: a.name, error: a.error, bytes: Buffer.from(p) });
    if (a.error) return this.endWith(fc, a.error, a.message);
    fc.acquire = a;
    if (a.resume && node.holdResumes) {
      // A node about to serve holds a resume until it does (section 14, "Holding a resume").
      node.held.push(fc);
      return;
    }
    if (this.nodes[this.leader] !== node) return this.endWith(fc, "NOT_LEADER", node.hint ?? this.nodes[this.leader].addr);
    if (a.resume) return this.resume(fc, a);
    const t = this.table(a.name);
    const claim = { name: a.name, shared: a.shared, limit: a.limit, leaseMs: a.leaseMs, token: 0n, ticket: 0n, conn: fc, number: 0, credentialed: a.version === 3, ended: false, gen: 0 };
    fc.claim = claim;
    if (t.waiters.length === 0 && this.canHold(claim)) {
      claim.token = this.next();
      t.holders.push(claim);
      this.claims.set(`H:${claim.token}`, claim);
      return this.send(fc, this.acquired(claim));
    }
    if (a.nowait) return this.endWith(fc, "BUSY");
    claim.ticket = this.next();
    t.waiters.push(claim);
    this.claims.set(`W:${claim.ticket}`, claim);
    this.send(fc, this.waiting(claim));
  }

  /** What the server answers to a resume (section 14's table, the rows a client can meet here). */
  resume(fc, a) {
    const role = a.held ? "H" : "W";
    const want = credential({ role, generation: a.generation, shared: a.shared, limit: a.limit, leaseMs: a.leaseMs, id: a.id, name: a.name }).credential;
    if (!want.equals(a.credential)) return this.endWith(fc, "BAD_CREDENTIAL");
    if (a.generation !== this.generation && a.generation !== this.generation - 1) return this.endWith(fc, "RESUME_REFUSED", "generation too old");
    const claim = this.claims.get(`${role}:${a.id}`);
    if (!claim || claim.ended) return this.endWith(fc, "RESUME_REFUSED", "claim ended");
    if (a.attempt <= claim.number) return this.endWith(fc, "MOVED");
    const old = claim.conn;
    claim.conn = fc;
    claim.number = a.attempt;
    fc.claim = claim;
    this.event({ kind: "moved", node: fc.node.idx, conn: fc.id, from: old?.id, attempt: a.attempt, name: claim.name });
    if (old) old.claim = undefined; // its end releases nothing
    // The old connection is ended with MOVED by its own server; one on
    // another node (the leader before, gone or no longer serving) hears
    // nothing of the move.
    if (old && !old.done && old.node.serverId === fc.node.serverId) {
      if (this.movedDelayMs) setTimeout(() => this.endWith(old, "MOVED"), this.movedDelayMs);
      else this.endWith(old, "MOVED");
    }
    const t = this.table(claim.name);
    if (t.holders.includes(claim)) return this.send(fc, this.acquired(claim));
    this.send(fc, this.waiting(claim));
  }

  onHeartbeat(fc) {
    this.event({ kind: "heartbeat", node: fc.node.idx, conn: fc.id });
    const claim = fc.claim;
    if (!claim || claim.conn !== fc) return this.endWith(fc, "PROTOCOL");
    if (fc.stalled) {
      fc.queued++;
      return;
    }
    this.reply(fc);
  }

  reply(fc) {
    const claim = fc.claim;
    if (!claim || claim.conn !== fc) return;
    const fresh = claim.credentialed && claim.gen < this.generation;
    const t = this.table(claim.name);
    if (t.holders.includes(claim)) this.send(fc, this.acquired(claim, { withCred: fresh }));
    else this.send(fc, this.waiting(claim, fresh));
  }

  onClientEnd(fc, how) {
    if (fc.clientEnd) return;
    fc.clientEnd = how;
    this.event({ kind: "client-end", node: fc.node.idx, conn: fc.id, how });
    const claim = fc.claim;
    if (!claim || claim.conn !== fc || fc.node.mode !== "serving" || fc.listed) return;
    this.release(claim); // the client's close or reset is its release
  }

  release(claim) {
    if (claim.ended) return;
    claim.ended = true;
    const t = this.table(claim.name);
    t.holders = t.holders.filter((h) => h !== claim);
    t.waiters = t.waiters.filter((w) => w !== claim);
    this.event({ kind: "released", name: claim.name, token: claim.token, ticket: claim.ticket });
    while (t.waiters.length && this.canHold(t.waiters[0])) {
      const w = t.waiters.shift();
      w.token = this.next();
      t.holders.push(w);
      this.claims.set(`H:${w.token}`, w);
      if (w.conn && !w.conn.done && !w.conn.stalled) this.send(w.conn, this.acquired(w, { push: true }));
    }
  }

  // ---- hooks ----

  /** The node's sessions of the claim `name` (or every session): end them as a planned handover does. */
  handover(i, { code = "NOT_LEADER", to = i, hint } = {}) {
    const node = this.nodes[i];
    this.leader = to;
    for (const fc of [...node.conns]) {
      fc.listed = true; // a close after this moment is not a release
      this.endWith(fc, code, code === "NOT_LEADER" ? (hint ?? this.nodes[to].addr) : "");
    }
  }

  /** The node goes away: "fin" (its process died), "reset", or "silent" (its host died: nothing answers). */
  crash(i, how, to = i) {
    const node = this.nodes[i];
    this.leader = to;
    for (const fc of [...node.conns]) {
      fc.listed = true;
      if (how === "fin") {
        fc.done = true;
        fc.sock.end();
      } else if (how === "reset") {
        fc.done = true;
        fc.sock.resetAndDestroy();
      }
    }
    if (how === "silent") node.mode = "silent";
  }

  /** The node's process is gone: its port refuses connections (startListening() brings it back). */
  stopListening(i) {
    const node = this.nodes[i];
    node.server.close(); // the listening socket goes at once; the callback would wait for the connections
    node.listening = false;
  }

  async startListening(i) {
    const node = this.nodes[i];
    node.server = net.createServer((sock) => this.accept(node, sock));
    await new Promise((r, j) => node.server.once("error", j).listen(node.port, "127.0.0.1", r));
    node.listening = true;
  }

  /** Resets only the client's side of one connection (a middlebox that the server did not hear): the claim stays here. */
  resetClientSide(fc) {
    fc.listed = true;
    fc.done = true;
    fc.sock.resetAndDestroy();
  }

  /** The claim's connection of `name` (the last claim of that name). */
  connOf(name) {
    for (const c of [...this.claims.values()].reverse()) if (c.name === name && !c.ended) return c.conn;
    return undefined;
  }

  claimOf(name) {
    for (const c of [...this.claims.values()].reverse()) if (c.name === name && !c.ended) return c;
    return undefined;
  }

  /** The claim's connection stops answering heartbeats; unstall() answers those it kept. */
  stall(name) {
    const fc = this.connOf(name);
    fc.stalled = true;
    return fc;
  }

  unstall(fc) {
    fc.stalled = false;
    for (; fc.queued > 0; fc.queued--) this.reply(fc);
  }

  newGeneration() {
    this.generation++;
  }

  /** Answers the held resume of attempt `attempt` (or the first held) now; `answer` overrides (a frame). */
  answerHeld(i, attempt, answer) {
    const node = this.nodes[i];
    const k = attempt === undefined ? 0 : node.held.findIndex((fc) => fc.acquire.attempt === attempt);
    if (k < 0) throw new Error(`node ${i} holds no resume of attempt ${attempt}`);
    const [fc] = node.held.splice(k, 1);
    if (answer) return this.send(fc, typeof answer === "function" ? answer(fc) : answer);
    this.resume(fc, fc.acquire);
  }

  async waitFor(pred, what, ms = 10_000) {
    const deadline = performance.now() + ms;
    for (;;) {
      const e = this.events.find(pred);
      if (e) return e;
      if (performance.now() > deadline) throw new Error(`fake cluster: after ${ms} ms, no ${what}; events: ${this.events.map((x) => `${x.kind}@${x.node}`).join(" ")}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  async close() {
    for (const n of this.nodes) {
      for (const fc of n.conns) fc.sock.destroy();
      if (n.listening !== false) await new Promise((r) => n.server.close(() => r()));
    }
  }
}
