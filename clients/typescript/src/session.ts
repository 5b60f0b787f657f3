/** One session: one connection, one claim on one lock (internal). */

import type { Socket } from "node:net";
import { performance } from "node:perf_hooks";
import type { Clock } from "./clock.js";
import { BatonError, ConnectionBroken, LockLost, MaxHoldReached, Unconfirmed, UnauthorizedError, errorForCode } from "./errors.js";
import type { Logger } from "./log.js";
import * as wire from "./wire.js";

/** The floor of the heartbeat interval, in ms (see the Go client's heartbeat.go). */
export const MIN_HEARTBEAT_INTERVAL_MS = 1;

/** The server sent a frame that no server may send. */
export class Violation extends BatonError {
  override name = "Violation";
}

/**
 * The heartbeat schedule of docs/protocol.md: base = lease/4; timeout = 0.8 ×
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

/** What a session needs besides its socket. */
export interface SessionOptions {
  /** A close the client chooses resets the connection (RST). */
  reset: boolean;
  /** Ends the claim this long after the grant (ms). */
  maxHoldMs?: number;
  /** Called with the place in the queue on each WAITING reply. */
  onWaiting?: (position: number) => void;
  /** Once held, the socket and the timer do not keep the process alive. */
  unref?: boolean;
  log: Required<Logger>;
  /** The clock of the deadlines (clock.ts): it counts a suspend of the machine. */
  clock: Clock;
}

/**
 * The session's socket 'data' handler is its permanent reader, so a
 * promotion push is seen the moment it arrives; one timer is its clock: the
 * next heartbeat (at most one in flight), the reply a quarter lease late,
 * the deadline (0.8 × lease from the send of the last request the server
 * answered) and the hold limit. A blocked event loop runs no timer, so
 * `expireIfLate` lets any question about the lock read the clock itself.
 *
 * Every time kept here is a reading of `opts.clock`, which counts a suspend
 * of the machine; the timer counts the monotonic clock, which does not, and
 * after a suspend fires late: the tick reads the clock, and never takes
 * the timer's firing for the deadline.
 */
export class Session {
  state: State = "waiting";
  token = 0n;
  position = 0;
  replied = false;
  /** Why it ended; undefined after a release. */
  error?: Error;
  /** The loss's reason, once held and lost. */
  cause?: Error;
  readonly controller = new AbortController();
  readonly sched: Schedule;
  private sentAt = 0;
  private deadline = 0;
  private pending = true;
  private nextBeat?: number;
  private missAt?: number;
  private holdUntil?: number;
  private buf: Buffer = Buffer.alloc(0);
  private closing = false;
  private timer?: NodeJS.Timeout;
  private listeners: Array<() => void> = [];
  private closed: Promise<void>;

  /**
   * sock carries the protocol; raw is the TCP socket under it (sock itself
   * without TLS), which a close the client chooses resets.
   */
  constructor(
    private readonly sock: Socket,
    private readonly raw: Socket,
    readonly addr: string,
    readonly name: string,
    leaseMs: number,
    acquire: Buffer,
    private readonly opts: SessionOptions,
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
    this.sentAt = opts.clock();
    this.deadline = this.sentAt + this.sched.timeout;
    this.arm();
    sock.write(acquire);
  }

  /** Calls f at every change of state (held, ended). */
  onChange(f: () => void): () => void {
    this.listeners.push(f);
    return () => {
      this.listeners = this.listeners.filter((g) => g !== f);
    };
  }

  /** The performance.now() from which the lock must be taken as lost: the time left now, from now. */
  validUntil(): number {
    const until = this.holdUntil === undefined ? this.deadline : Math.min(this.deadline, this.holdUntil);
    return performance.now() + (until - this.opts.clock());
  }

  /** Ends a held lock whose deadline has passed: the clock decides, not whether a timer has run. */
  expireIfLate(): void {
    if (this.state !== "held") return;
    const late = this.overdue(this.opts.clock());
    if (late) this.end(late);
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
    if (this.opts.reset && !this.raw.destroyed) this.raw.resetAndDestroy();
    this.sock.destroy();
    await this.closed;
    this.end(new ConnectionBroken("closed"));
  }

  private notify(): void {
    for (const f of [...this.listeners]) f();
  }

  private overdue(now: number): Error | undefined {
    if (now >= this.deadline) return this.unconfirmed();
    if (this.state === "held" && this.holdUntil !== undefined && now >= this.holdUntil) {
      return new MaxHoldReached(`held for the maximum of ${this.opts.maxHoldMs}ms`);
    }
    return undefined;
  }

  private arm(): void {
    clearTimeout(this.timer);
    if (this.state === "ended") return;
    let at = this.deadline;
    for (const t of [this.nextBeat, this.missAt, this.holdUntil]) if (t !== undefined && t < at) at = t;
    // Never more than a quarter lease: the timer counts the monotonic clock,
    // and a suspend of the machine makes it late; the tick reads the clock.
    this.timer = setTimeout(() => this.tick(), Math.min(Math.max(at - this.opts.clock(), 0), this.sched.leaseMs / 4));
    if (this.opts.unref && this.state === "held") this.timer.unref();
  }

  private tick(): void {
    if (this.state === "ended") return;
    const now = this.opts.clock(); // a timer late by a suspend ends the claim here
    const late = this.overdue(now);
    if (late) return this.end(late);
    if (this.missAt !== undefined && now >= this.missAt) {
      this.missAt = undefined;
      this.opts.log.warn(
        `baton: lock ${JSON.stringify(this.name)}: no reply from ${this.addr} to the heartbeat sent ${Math.round(now - this.sentAt)} ms ago; ` +
          `the claim ends at 0.8 × lease (${this.sched.timeout} ms after that send) unless one comes`,
        { lock: this.name, addr: this.addr, event: "heartbeat-miss" },
      );
    }
    if (this.nextBeat !== undefined && now >= this.nextBeat) {
      this.sentAt = now;
      this.pending = true;
      this.nextBeat = undefined;
      this.missAt = now + this.sched.leaseMs / 4;
      this.sock.write(wire.HEARTBEAT);
    }
    this.arm();
  }

  private unconfirmed(): Unconfirmed {
    const s = this.sched;
    return new Unconfirmed(`no confirmation from the server for ${s.timeout}ms (0.8 × lease ${s.leaseMs}ms)`);
  }

  private end(err: Error): void {
    if (this.state === "ended") return;
    const held = this.state === "held";
    clearTimeout(this.timer);
    if (this.closing) {
      this.error = undefined;
    } else if (held) {
      this.cause = err;
      this.error = new LockLost(this.name, err);
    } else {
      this.error = err;
    }
    this.state = "ended";
    if (held && this.error) {
      this.opts.log.warn(`baton: lock ${JSON.stringify(this.name)} lost: ${err.message}`, { lock: this.name, addr: this.addr, event: "loss" });
      this.controller.abort(this.error);
    }
    // A claim the client ends on purpose (maxHoldMs) goes as a release does.
    if (err instanceof MaxHoldReached && this.opts.reset && !this.raw.destroyed) this.raw.resetAndDestroy();
    this.sock.destroy();
    this.notify();
  }

  private onData(d: Buffer): void {
    const at = this.opts.clock();
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
      const late = this.overdue(at);
      if (late) return this.end(late);
      if (f.type === wire.T_ACQUIRED && f.push) {
        if (this.state === "held") return this.end(new Violation("promotion push while holding the lock"));
        this.grant(f.token, at);
        continue;
      }
      if (!this.pending) return this.end(new Violation("reply with no request outstanding"));
      this.pending = false;
      this.replied = true;
      this.missAt = undefined;
      this.sched.observe(at - this.sentAt);
      this.deadline = this.sentAt + this.sched.timeout;
      this.nextBeat = at + this.sched.interval();
      if (f.type === wire.T_WAITING) {
        if (this.state === "held") return this.end(new Violation(`WAITING (position ${f.position}) after the lock was granted`));
        this.position = f.position;
        this.reportPosition(f.position);
      } else if (this.state !== "held") {
        this.grant(f.token, at);
      } else if (f.token !== this.token) {
        return this.end(new Violation(`ACQUIRED with token ${f.token} while holding token ${this.token}`));
      }
    }
    if (error) return this.end(new Violation(`server ${this.addr} sent a bad frame: ${error}`));
    this.arm();
  }

  private reportPosition(position: number): void {
    try {
      this.opts.onWaiting?.(position);
    } catch (e) {
      this.opts.log.warn(`baton: the onWaiting callback of lock ${JSON.stringify(this.name)} failed: ${(e as Error).message}`, { lock: this.name });
    }
  }

  private grant(token: bigint, at: number): void {
    if (this.state !== "waiting") return;
    this.state = "held";
    this.token = token;
    if (this.opts.unref) {
      this.sock.unref();
      this.raw.unref();
    }
    if (this.opts.maxHoldMs !== undefined) this.holdUntil = at + this.opts.maxHoldMs;
    this.notify();
  }
}
