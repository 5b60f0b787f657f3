/** One session: one connection, one claim on one lock (internal). */

import type { Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { BatonError, ConnectionBroken, LockLost, Unconfirmed, UnauthorizedError, errorForCode } from "./errors.js";
import * as wire from "./wire.js";

/** The floor of the heartbeat interval, in ms (see the Go client's heartbeat.go). */
export const MIN_HEARTBEAT_INTERVAL_MS = 1;

/** The server sent a frame that no server may send. */
export class Violation extends BatonError {
  override name = "Violation";
}

/**
 * The heartbeat schedule of PROTOCOL.md: base = lease/4; timeout = 0.8 ×
 * lease; srtt an EWMA (alpha 0.2) of reply round trips, the first sample
 * taken whole; interval = clamp(base − 2 × srtt, min, base), from the reply.
 */
export class Schedule {
  srtt = 0;
  samples = 0;
  constructor(readonly leaseMs: number) {}
  observe(rtt: number): void {
    rtt = Math.max(rtt, 0);
    this.srtt = this.samples === 0 ? rtt : (4 * this.srtt + rtt) / 5;
    this.samples++;
  }
  get timeout(): number {
    return this.leaseMs * 0.8;
  }
  interval(): number {
    const base = this.leaseMs / 4;
    return Math.min(Math.max(base - 2 * this.srtt, Math.min(MIN_HEARTBEAT_INTERVAL_MS, base)), base);
  }
}

export type State = "waiting" | "held" | "ended";

/**
 * The session's socket 'data' handler is its permanent reader, so a
 * promotion push is seen the moment it arrives; two timers are its clock:
 * the next heartbeat (at most one in flight) and the 0.8 × lease deadline,
 * counted from the send of the last request the server answered.
 */
export class Session {
  state: State = "waiting";
  token = 0n;
  position = 0;
  replied = false;
  /** Why it ended; undefined after a release. */
  error?: Error;
  /** The loss's cause, once held and lost. */
  cause?: Error;
  readonly controller = new AbortController();
  readonly sched: Schedule;
  private sentAt = 0;
  private deadline = 0;
  private pending = true;
  private buf: Buffer = Buffer.alloc(0);
  private closing = false;
  private beatTimer?: NodeJS.Timeout;
  private deadlineTimer?: NodeJS.Timeout;
  private listeners: Array<() => void> = [];
  private closed: Promise<void>;

  /**
   * sock carries the protocol; raw is the TCP socket under it (sock itself
   * without TLS), which close resets when reset is true.
   */
  constructor(
    private readonly sock: Socket,
    private readonly raw: Socket,
    readonly addr: string,
    readonly name: string,
    leaseMs: number,
    acquire: Buffer,
    private readonly reset = true,
  ) {
    this.sched = new Schedule(leaseMs);
    this.closed = new Promise((resolve) => sock.once("close", () => resolve()));
    sock.setNoDelay(true);
    sock.on("data", (d: Buffer) => this.onData(d));
    sock.on("error", (e: Error & { code?: string }) => {
      if (/CERTIFICATE|ALERT/i.test(String(e.code ?? "") + e.message)) {
        this.end(new UnauthorizedError(`TLS: ${addr} refused this client: ${e.message}`));
      } else {
        this.end(new ConnectionBroken(`connection to ${addr}: ${e.message}`));
      }
    });
    sock.on("close", () => this.end(new ConnectionBroken(`connection to ${addr} closed by the server`)));
    this.sentAt = performance.now();
    this.armDeadline(this.sentAt + this.sched.timeout);
    sock.write(acquire);
  }

  /** Calls f at every change of state (held, ended). */
  onChange(f: () => void): () => void {
    this.listeners.push(f);
    return () => {
      this.listeners = this.listeners.filter((g) => g !== f);
    };
  }

  /**
   * Ends the session from outside: the release, or giving up the place in
   * the queue. The socket is closed at once, with a reset (RST, the
   * default: the TCP socket under TLS, without close_notify) or a FIN
   * (normalClose). Ends the client did not choose (the server's ERROR or
   * close, a lost confirmation) close with a FIN (end).
   */
  async close(): Promise<void> {
    if (this.state !== "ended") this.closing = true;
    if (this.reset && !this.raw.destroyed) this.raw.resetAndDestroy();
    this.sock.destroy();
    await this.closed;
    this.end(new ConnectionBroken("closed"));
  }

  private notify(): void {
    for (const f of [...this.listeners]) f();
  }

  private armDeadline(at: number): void {
    this.deadline = at;
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = setTimeout(() => this.end(this.unconfirmed()), Math.max(at - performance.now(), 0));
  }

  private unconfirmed(): Unconfirmed {
    const s = this.sched;
    return new Unconfirmed(`no confirmation from the server for ${s.timeout}ms (0.8 × lease ${s.leaseMs}ms)`);
  }

  private end(err: Error): void {
    if (this.state === "ended") return;
    const held = this.state === "held";
    clearTimeout(this.beatTimer);
    clearTimeout(this.deadlineTimer);
    if (this.closing) {
      this.error = undefined;
    } else if (held) {
      this.cause = err;
      this.error = new LockLost(this.name, err);
    } else {
      this.error = err;
    }
    this.state = "ended";
    if (held && this.error) this.controller.abort(this.error);
    this.sock.destroy();
    this.notify();
  }

  private beat(): void {
    if (this.state === "ended") return;
    this.sentAt = performance.now();
    this.pending = true;
    this.sock.write(wire.HEARTBEAT);
  }

  private onData(d: Buffer): void {
    const at = performance.now();
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    const { frames, rest, error } = wire.split(this.buf);
    this.buf = rest;
    for (const [type, payload] of frames) {
      if (this.state === "ended") return;
      let f: wire.Frame;
      try {
        f = wire.decode(type, payload);
      } catch (e) {
        return this.end(new Violation(`server ${this.addr} sent a bad frame: ${(e as Error).message}`));
      }
      if (f.type === wire.T_ERROR) return this.end(errorForCode(f.code, f.message));
      // A frame that arrives after the deadline confirms nothing: the server
      // may already have moved the lock.
      if (at >= this.deadline) return this.end(this.unconfirmed());
      if (f.type === wire.T_ACQUIRED && f.push) {
        if (this.state === "held") return this.end(new Violation("promotion push while holding the lock"));
        this.grant(f.token);
        continue;
      }
      if (!this.pending) return this.end(new Violation("reply with no request outstanding"));
      this.pending = false;
      this.replied = true;
      this.sched.observe(at - this.sentAt);
      this.armDeadline(this.sentAt + this.sched.timeout);
      clearTimeout(this.beatTimer);
      this.beatTimer = setTimeout(() => this.beat(), Math.max(at + this.sched.interval() - performance.now(), 0));
      if (f.type === wire.T_WAITING) {
        if (this.state === "held") return this.end(new Violation(`WAITING (position ${f.position}) after the lock was granted`));
        this.position = f.position;
      } else if (this.state !== "held") {
        this.grant(f.token);
      } else if (f.token !== this.token) {
        return this.end(new Violation(`ACQUIRED with token ${f.token} while holding token ${this.token}`));
      }
    }
    if (error) this.end(new Violation(`server ${this.addr} sent a bad frame: ${error}`));
  }

  private grant(token: bigint): void {
    if (this.state !== "waiting") return;
    this.state = "held";
    this.token = token;
    this.notify();
  }
}
