/** The Baton client: named locks where the TCP connection is the claim. */

import * as net from "node:net";
import * as os from "node:os";
import * as tls from "node:tls";
import { Leadership } from "./election.js";
import {
  AlreadyHeld,
  BadRequestError,
  BatonError,
  ConnectionBroken,
  LeaseExpiredError,
  LockLost,
  NotLeaderError,
  ServerError,
  ShutdownError,
  Unconfirmed,
} from "./errors.js";
import { Held, failure } from "./held.js";
import { safeLogger, type Logger } from "./log.js";
import { HeldMany, acquireAll } from "./many.js";
import { Session } from "./session.js";
import * as wire from "./wire.js";

export const DEFAULT_LEASE_MS = 10_000;
export const DEFAULT_DIAL_TIMEOUT_MS = 5_000;

/** Redirects (NOT_LEADER with a hint on the list) followed at once before backing off. */
const REDIRECT_BUDGET = 3;

/** Options of a Client. */
export interface ClientOptions {
  /** The lease in ms: after this long of silence the server moves the lock. Default 10 s. */
  leaseMs?: number;
  /** Who this is, for operators (default `hostname:pid`). */
  owner?: string;
  /** TLS options (ca, cert, key, servername...); set to use TLS. */
  tls?: tls.ConnectionOptions;
  /** Bound of each connection attempt, TLS included, in ms. Default 5 s. */
  dialTimeoutMs?: number;
  /**
   * Release (and give up a wait) with a normal close (FIN) instead of a
   * reset (RST), the default. The reset reaches the server at once as a
   * FIN does, and leaves no socket in TIME_WAIT here, where a claim storm
   * would run out of ports; but it is sent once, where a FIN is
   * retransmitted: on a network that loses it the lock is freed at the end
   * of the lease instead, later but never earlier.
   */
  normalClose?: boolean;
  /**
   * Told of connections (debug), redirects and reconnections (info),
   * heartbeat replies a quarter lease late and losses (warn). `console`
   * fits. Default: none.
   */
  logger?: Logger;
}

/** Options of one acquire. */
export interface AcquireOptions {
  /** Throw BusyError at once if the lock is held, instead of waiting. */
  nowait?: boolean;
  /** Ends the wait: the acquire rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Ends the claim this many ms after the grant, as a loss whose reason is
   * MaxHoldReached: a bound on the hold time, where the lease bounds only
   * silence. Default: none.
   */
  maxHoldMs?: number;
  /**
   * Called with the place in the queue (1 is next) on every WAITING reply:
   * the first answer and the reply to each heartbeat after it. It runs in
   * the session's socket handler and must return at once.
   */
  onWaiting?: (position: number) => void;
  /** The owner text of this claim, instead of the Client's. */
  owner?: string;
  /**
   * Take a place in the queue of a name this Client already holds or waits
   * for (granted after that other claim ends), instead of AlreadyHeld: to
   * hand a lock on between parts of one process.
   */
  queueBehindSelf?: boolean;
}

/** Options of acquireMany: AcquireOptions that apply to the whole. */
export interface AcquireManyOptions {
  /** Ends the wait for the whole set: nothing stays held. */
  signal?: AbortSignal;
  /** Bounds each name's hold from its own grant (see AcquireOptions.maxHoldMs). */
  maxHoldMs?: number;
}

function splitAddr(addr: string): [string, number] {
  const i = addr.lastIndexOf(":");
  const port = Number(addr.slice(i + 1));
  let host = addr.slice(0, i);
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) throw new BadRequestError(`address ${JSON.stringify(addr)} is not host:port`);
  if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1);
  return [host, port];
}

function defaultOwner(): string {
  const owner = `${os.hostname()}:${process.pid}`;
  try {
    wire.checkOwner(owner);
    return owner;
  } catch {
    return `pid:${process.pid}`;
  }
}

/** Jittered exponential backoff: 50 ms doubling up to 2 s, times 0.5-1. */
function backoff(failures: number): number {
  return Math.min(50 * 2 ** Math.max(failures - 1, 0), 2000) * (0.5 + Math.random() / 2);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A Baton client for the servers at `addrs` (`host:port` each). Inputs the
 * server would refuse throw BadRequestError here, before any connection.
 *
 * Locks are not re-entrant: asking the same Client for a name it already
 * holds or waits for rejects with AlreadyHeld at once, unless
 * `queueBehindSelf: true`.
 */
export class Client {
  readonly addrs: readonly string[];
  readonly owner: string;
  readonly leaseMs: number;
  readonly #hosts: Array<[string, number]>;
  readonly #tls?: tls.ConnectionOptions;
  readonly #dialTimeoutMs: number;
  readonly #normalClose: boolean;
  readonly #log: Required<Logger>;
  readonly #inUse = new Map<string, number>();
  #last = 0;

  constructor(addrs: string[] | string, opts: ClientOptions = {}) {
    const list = typeof addrs === "string" ? addrs.split(",").map((a) => a.trim()).filter(Boolean) : [...addrs];
    if (list.length === 0) throw new BadRequestError("no server address");
    this.addrs = list;
    this.#hosts = list.map(splitAddr);
    this.leaseMs = wire.checkLeaseMs(opts.leaseMs ?? DEFAULT_LEASE_MS);
    this.owner = opts.owner ?? defaultOwner();
    wire.checkOwner(this.owner);
    this.#tls = opts.tls;
    this.#dialTimeoutMs = opts.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS;
    this.#normalClose = opts.normalClose ?? false;
    this.#log = safeLogger(opts.logger);
  }

  /** Waits for the lock and resolves with it held. Release it with `held.release()`, or `await using`. */
  async acquire(name: string, opts: AcquireOptions = {}): Promise<Held> {
    return new Held(await this.#claimed(name, opts));
  }

  /**
   * Runs fn while holding the lock, and releases it after. fn gets a signal
   * aborted when the client sees the loss; ask `held.check()` before each
   * step that touches the guarded resource. withLock rejects with a
   * LockLost if ownership ended while fn ran (when fn itself failed, its
   * error is the LockLost's cause).
   */
  async withLock<T>(name: string, fn: (signal: AbortSignal, held: Held) => Promise<T> | T, opts: AcquireOptions = {}): Promise<T> {
    const held = await this.acquire(name, opts);
    let result: T;
    try {
      result = await fn(held.signal, held);
    } catch (e) {
      throw await failure(held, e);
    }
    await held.release();
    return result;
  }

  /**
   * Holds every name or none: acquires them in sorted order (so two callers
   * with overlapping sets cannot deadlock), and on any failure releases the
   * ones it holds. The HeldMany's signal is aborted when any one is lost.
   */
  async acquireMany(names: readonly string[], opts: AcquireManyOptions = {}): Promise<HeldMany> {
    return acquireAll(names, (name) => this.acquire(name, { signal: opts.signal, maxHoldMs: opts.maxHoldMs }));
  }

  /** Runs fn while holding every name (see acquireMany and withLock). */
  async withLocks<T>(names: readonly string[], fn: (signal: AbortSignal, many: HeldMany) => Promise<T> | T, opts: AcquireManyOptions = {}): Promise<T> {
    const many = await this.acquireMany(names, opts);
    let result: T;
    try {
      result = await fn(many.signal, many);
    } catch (e) {
      throw await failure(many, e);
    }
    await many.release();
    return result;
  }

  /**
   * Waits until this candidate leads `name`, with `value` as the owner text
   * operators see, and resolves with the Leadership; `resign()` gives it up
   * and the next candidate leads at once.
   */
  async campaign(name: string, value: string, opts: Pick<AcquireOptions, "signal" | "onWaiting"> = {}): Promise<Leadership> {
    return new Leadership(await this.#claimed(name, { ...opts, owner: value }), value);
  }

  /** Acquires under the re-entrancy rule: the name counts as in use until its session ends. */
  async #claimed(name: string, opts: AcquireOptions): Promise<Session> {
    const frame = wire.encodeAcquire(name, this.leaseMs, opts.owner ?? this.owner, opts.nowait ?? false);
    const maxHoldMs = opts.maxHoldMs;
    if (maxHoldMs !== undefined && !(Number.isFinite(maxHoldMs) && maxHoldMs > 0)) {
      throw new BadRequestError(`maxHoldMs ${maxHoldMs} must be a positive number of milliseconds`);
    }
    const n = this.#inUse.get(name) ?? 0;
    if (n > 0 && !opts.queueBehindSelf && !opts.nowait) {
      throw new AlreadyHeld(`lock ${JSON.stringify(name)} is already held or awaited through this client (locks are not re-entrant; queueBehindSelf: true queues behind it)`);
    }
    this.#inUse.set(name, n + 1);
    const unclaim = () => {
      const left = (this.#inUse.get(name) ?? 1) - 1;
      if (left > 0) this.#inUse.set(name, left);
      else this.#inUse.delete(name);
    };
    let s: Session;
    try {
      s = await this.#acquire(name, frame, opts);
    } catch (e) {
      unclaim();
      throw e;
    }
    const off = s.onChange(() => {
      if (s.state === "ended") {
        off();
        unclaim();
      }
    });
    return s;
  }

  async #acquire(name: string, frame: Buffer, opts: AcquireOptions): Promise<Session> {
    const signal = opts.signal;
    const log = this.#log;
    let idx = this.#last % this.addrs.length;
    let reached = false;
    let failures = 0;
    let redirects = 0;
    let lastErr: Error | undefined;
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      let sock: net.Socket | undefined;
      let raw: net.Socket | undefined;
      for (let k = 0; k < this.addrs.length && !sock; k++) {
        const i = (idx + k) % this.addrs.length;
        try {
          [sock, raw] = await this.#dial(i, signal);
          idx = i;
          log.debug(`baton: connected to ${this.addrs[i]} for ${JSON.stringify(name)}`, { lock: name, addr: this.addrs[i], event: "connect" });
        } catch (e) {
          if (signal?.aborted) throw signal.reason;
          lastErr = e instanceof BatonError ? e : new ConnectionBroken(`cannot reach ${this.addrs[i]}: ${(e as Error).message}`);
          log.debug(`baton: ${lastErr.message}`, { lock: name, addr: this.addrs[i], event: "connect-failed" });
        }
      }
      if (!sock) {
        if (!reached) throw lastErr!;
        failures++;
        await sleep(backoff(failures), signal);
        continue;
      }
      reached = true;
      const s = new Session(sock, raw!, this.addrs[idx], name, this.leaseMs, frame, {
        reset: !this.#normalClose,
        maxHoldMs: opts.maxHoldMs,
        onWaiting: opts.onWaiting,
        log,
      });
      await new Promise<void>((resolve) => {
        if (s.state !== "waiting") return resolve();
        const off = s.onChange(() => {
          off();
          signal?.removeEventListener("abort", onAbort);
          resolve();
        });
        const onAbort = () => {
          off();
          resolve();
        };
        signal?.addEventListener("abort", onAbort, { once: true });
      });
      if (s.state === "held" && !signal?.aborted) {
        this.#last = idx;
        return s;
      }
      if (s.state !== "ended") {
        await s.close();
        throw signal!.reason;
      }
      if (signal?.aborted) {
        await s.close();
        throw signal.reason;
      }
      const err = s.error!;
      if (err instanceof LockLost) throw err; // granted and lost before it could be handed over
      lastErr = err;
      if (s.replied) failures = 0;
      failures++;
      let atOnce = false;
      const here = this.addrs[idx];
      if (err instanceof NotLeaderError) {
        const hint = err.serverMessage;
        if (this.addrs.includes(hint) && redirects < REDIRECT_BUDGET) {
          idx = this.addrs.indexOf(hint);
          redirects++;
          failures--;
          log.info(`baton: ${here} is not the leader; following it to ${hint}`, { lock: name, addr: here, leader: hint, event: "redirect" });
          continue;
        }
        idx = (idx + 1) % this.addrs.length;
        log.info(`baton: ${here} is not the leader (${hint ? `it names ${hint}, not on this client's list` : "no leader known"}); trying ${this.addrs[idx]}`, { lock: name, addr: here, event: "redirect" });
      } else if (err instanceof ShutdownError) {
        idx = (idx + 1) % this.addrs.length; // this one is going away
        atOnce = failures <= 1;
      } else if (err instanceof LeaseExpiredError) {
        atOnce = failures <= 1;
      } else if (err instanceof ServerError && err.serverCondition) {
        // OVERLOADED, and conditions not yet named: back off
      } else if (err instanceof Unconfirmed || err instanceof ConnectionBroken) {
        idx = (idx + 1) % this.addrs.length;
      } else {
        throw err;
      }
      redirects = 0;
      const pause = atOnce ? 0 : backoff(failures);
      log.info(`baton: waiting for ${JSON.stringify(name)}: ${err.message}; reconnecting in ${Math.round(pause)} ms`, { lock: name, addr: here, event: "reconnect" });
      if (pause > 0) await sleep(pause, signal);
    }
  }

  /**
   * Connects to address i: the socket that carries the protocol (TLS or
   * TCP), and the TCP socket under it, which a release resets (a TLS
   * socket cannot be reset itself).
   */
  #dial(i: number, signal?: AbortSignal): Promise<[net.Socket, net.Socket]> {
    const [host, port] = this.#hosts[i];
    return new Promise((resolve, reject) => {
      const raw = net.connect({ host, port });
      const sock: net.Socket = this.#tls
        ? tls.connect({ ...this.#tls, socket: raw, host, port, servername: this.#tls.servername ?? (net.isIP(host) ? undefined : host) })
        : raw;
      const event = this.#tls ? "secureConnect" : "connect";
      const timer = setTimeout(() => fail(new ConnectionBroken(`dial ${this.addrs[i]}: timed out after ${this.#dialTimeoutMs}ms`)), this.#dialTimeoutMs);
      const onAbort = () => fail(signal!.reason);
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        sock.removeListener("error", fail);
      };
      function fail(e: Error) {
        cleanup();
        sock.destroy();
        raw.destroy();
        reject(e);
      }
      sock.once("error", fail);
      sock.once(event, () => {
        cleanup();
        resolve([sock, raw]);
      });
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}
