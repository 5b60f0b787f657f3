/** The Baton client: named locks where the TCP connection is the claim. */

import * as net from "node:net";
import * as os from "node:os";
import * as tls from "node:tls";
import { WallChecked, type Clock } from "./clock.js";
import { Leadership } from "./election.js";
import {
  AcquireTimeoutError,
  AlreadyHeld,
  BadRequestError,
  BatonError,
  ConnectionBroken,
  TLSError,
  LeaseExpiredError,
  LimitMismatchError,
  LockLost,
  NotLeaderError,
  ResumeRefusedError,
  ServerError,
  ShutdownError,
  Unconfirmed,
  VersionError,
} from "./errors.js";
import { Held, failure } from "./held.js";
import { safeLogger, type Logger } from "./log.js";
import { HeldMany, acquireAll, order } from "./many.js";
import { OpsAPI, type Leader } from "./ops.js";
import { Session, type Mover, type SessionOptions } from "./session.js";
import * as wire from "./wire.js";

export const DEFAULT_LEASE_MS = 10_000;
export const DEFAULT_DIAL_TIMEOUT_MS = 5_000;
/**
 * The limit of a reader's claim (`shared: true` without a limit): the
 * largest the protocol carries, as close to "no limit" as a shared claim
 * gets. Every reader of a name must give the same limit, so it is one fixed
 * number, the same in every Baton client.
 */
export const READER_LIMIT = wire.MAX_LIMIT;

/** Redirects (NOT_LEADER with a hint on the list) followed at once before backing off. */
const REDIRECT_BUDGET = 3;
/** How long an address that answered VERSION to version 3 is sent version 1 and 2 only; then version 3 is tried again (an upgrade). */
const VERSION_2_MEMORY_MS = 60_000;

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
  /**
   * Let the process exit while a lock is held: once granted, the socket
   * and timer of a claim do not keep Node.js's event loop alive
   * (`socket.unref()`), so a program that is done exits, and its exit is
   * the release. A wait still keeps the process alive. Default false: a
   * held lock keeps the process alive, as an open socket does, until it is
   * released. AcquireOptions can set it per claim.
   */
  unref?: boolean;
  /**
   * Wait, within the acquire's signal, for a server that is not up yet: an
   * address that refuses the connection is tried again with the backoff.
   * Default false: when no server has answered the first attempt, the
   * acquire rejects at once (a wrong address looks the same). A TLSError is
   * never waited out.
   */
  waitForServer?: boolean;
  /**
   * The waits between retries while waiting (after OVERLOADED, a broken
   * connection...): the first is `baseMs`, each next twice the last, up to
   * `capMs`, each jittered down to half. Default 50 ms and 2000 ms.
   */
  backoff?: { baseMs: number; capMs: number };
  /**
   * How many failed attempts in a row are tried again before the acquire
   * rejects with the last one's error; an attempt the server answered
   * starts the count again. Default: no bound but the signal.
   */
  retries?: number;
  /**
   * The server's ops API (`host:port`, https with `tls`, or an http(s)://
   * URL; one per node of a cluster), for leader() and observe(): the lock
   * protocol cannot say who holds a name.
   */
  opsAddrs?: string[];
  /** The ops API's bearer token (the server's -admin-token-file), for leader() and observe(). */
  adminToken?: string;
  /**
   * Let claims move to the next server (protocol version 3, the default):
   * when the server side ends a claim's connection (a restart, a change of
   * leader, a crash), a holder keeps its lock and token and a waiter its
   * place, within the claim's deadline. `false` sends today's version 1 and
   * 2 frames, and a claim ends with its connection. Turn it off for clients
   * that reach the servers through a TCP proxy that terminates connections
   * (docs/protocol.md section 14). AcquireOptions can set it per claim.
   */
  resume?: boolean;
}

/**
 * What a waiter knows of its wait, for `onWaitState`: its place in the
 * queue (1 is next), and `graceMs`, how long the server still grants
 * nothing (a crash or failover grace), when the server tells. Protocol
 * versions 1 and 2 do not carry it, so it is undefined today; `baton
 * locks`, `baton run` and the dashboard show it from the ops API.
 */
export interface WaitState {
  readonly position: number;
  readonly graceMs?: number;
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
  /**
   * Called with the WaitState on every WAITING reply, as onWaiting is with
   * the position (both may be given); it runs in the session's socket
   * handler and must return at once.
   */
  onWaitState?: (state: WaitState) => void;
  /** As ClientOptions.unref, for this claim. */
  unref?: boolean;
  /** As ClientOptions.resume, for this claim. */
  resume?: boolean;
  /** The owner text of this claim, instead of the Client's. */
  owner?: string;
  /**
   * Take a place in the queue of a name this Client already holds or waits
   * for (granted after that other claim ends), instead of AlreadyHeld: to
   * hand a lock on between parts of one process.
   */
  queueBehindSelf?: boolean;
  /**
   * A slot of a counting semaphore of `limit` slots: at most `limit` shared
   * claims hold the name at once (1..65535). Every shared claim of a name
   * must give the same limit while the name has shared sessions: another
   * rejects with LimitMismatchError at once, never retried.
   */
  limit?: number;
  /**
   * A reader of a read/write lock: shared with the other readers (limit
   * READER_LIMIT unless `limit` gives one); writers are ordinary claims of
   * the same name. Without `shared` or `limit` a claim is exclusive.
   */
  shared?: boolean;
}

/** The kind of one name's claim in acquireMany: see AcquireOptions. */
export type ClaimKind = Pick<AcquireOptions, "shared" | "limit">;

/** Options of acquireMany: AcquireOptions that apply to the whole. */
export interface AcquireManyOptions {
  /** Ends the wait for the whole set: nothing stays held. */
  signal?: AbortSignal;
  /** Bounds each name's hold from its own grant (see AcquireOptions.maxHoldMs). */
  maxHoldMs?: number;
  /** Makes every claim of the set shared (see AcquireOptions.shared). */
  shared?: boolean;
  /** Makes every claim of the set a slot of `limit` (see AcquireOptions.limit). */
  limit?: number;
  /** As ClientOptions.resume, for every claim of the set. */
  resume?: boolean;
  /**
   * Gives names a kind of their own, in place of `shared` and `limit`:
   * `{ perName: { config: { shared: true } } }` holds a reader of config
   * beside the set's other claims. A name outside the set is refused.
   */
  perName?: Readonly<Record<string, ClaimKind>>;
}

/** The version 2 fields of a claim from its options, or undefined for an exclusive claim (version 1). */
function claimOf(opts: ClaimKind): wire.Claim | undefined {
  if (opts.shared !== undefined && typeof opts.shared !== "boolean") throw new BadRequestError(`shared ${String(opts.shared)} is not true or false`);
  if (opts.limit !== undefined) return { shared: true, limit: wire.checkLimit(opts.limit) };
  return opts.shared ? { shared: true, limit: READER_LIMIT } : undefined;
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

/** Jittered exponential backoff: base doubling up to cap, times 0.5-1. */
function backoff(failures: number, baseMs = 50, capMs = 2000): number {
  return Math.min(baseMs * 2 ** Math.min(Math.max(failures - 1, 0), 32), capMs) * (0.5 + Math.random() / 2);
}

/** Whether a dial's error is TLS's: a certificate this client does not accept. */
function isTLSFailure(e: Error & { code?: string }): boolean {
  return /CERT|SELF_SIGNED|ERR_TLS|ERR_SSL|UNABLE_TO_(VERIFY|GET)/.test(String(e.code ?? "")) || /certificate/i.test(e.message);
}

/** The position callback of a claim: onWaiting, onWaitState, both or none. */
function waitingOf(opts: AcquireOptions): ((position: number) => void) | undefined {
  const { onWaiting, onWaitState } = opts;
  if (!onWaitState) return onWaiting;
  return (position) => {
    onWaiting?.(position);
    onWaitState({ position });
  };
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
 * `queueBehindSelf: true`. Shared claims count slots: a Client may hold
 * several slots of one semaphore, fewer than its limit; a claim that its
 * own claims alone would keep waiting (a slot beyond the limit, any claim
 * beside its own exclusive one, an exclusive claim beside its own shared
 * ones) rejects with AlreadyHeld.
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
  readonly #unref: boolean;
  readonly #waitForServer: boolean;
  readonly #backoff: { baseMs: number; capMs: number };
  readonly #retries: number | undefined;
  readonly #ops: OpsAPI;
  readonly #resume: boolean;
  /** The addresses that answered VERSION to version 3, with when (on #clock): sent version 1 and 2 for VERSION_2_MEMORY_MS. */
  readonly #speaksV2 = new Map<number, number>();
  /** How claims reach the servers when they move. */
  readonly #mover: Mover;
  /** Per name, this Client's claims under way or held: exclusive, shared, and the shared ones' limit. */
  readonly #inUse = new Map<string, { exclusive: number; shared: number; limit: number }>();
  #last = 0;
  /** The clock of every lock's deadline (clock.ts): it counts a suspend of the machine. */
  readonly #clock: Clock = new WallChecked().now;

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
    this.#unref = opts.unref ?? false;
    this.#waitForServer = opts.waitForServer ?? false;
    this.#backoff = opts.backoff ?? { baseMs: 50, capMs: 2000 };
    if (!(this.#backoff.baseMs > 0 && this.#backoff.capMs >= this.#backoff.baseMs)) {
      throw new BadRequestError(`backoff ${JSON.stringify(this.#backoff)}: baseMs must be positive and at most capMs`);
    }
    this.#retries = opts.retries;
    if (this.#retries !== undefined && !(Number.isInteger(this.#retries) && this.#retries >= 0)) {
      throw new BadRequestError(`retries ${this.#retries} is not a whole number >= 0`);
    }
    this.#ops = new OpsAPI(opts.opsAddrs ?? [], opts.adminToken, opts.tls);
    if (opts.resume !== undefined && typeof opts.resume !== "boolean") throw new BadRequestError(`resume ${String(opts.resume)} is not true or false`);
    this.#resume = opts.resume ?? true;
    this.#mover = {
      addrs: this.addrs,
      dial: (i, signal) => this.#dial(i, signal),
      speaksV2: (i) => this.#rememberV2(i),
    };
  }

  /** addrs[i] answered VERSION to version 3: send it versions 1 and 2 for a while. */
  #rememberV2(i: number): void {
    if (!this.#speaksV2.has(i)) {
      this.#log.info(`baton: ${this.addrs[i]} does not speak protocol version 3; sending it versions 1 and 2 for ${VERSION_2_MEMORY_MS / 1000} s (claims there cannot move to another server)`, { addr: this.addrs[i], event: "version-fallback" });
    }
    this.#speaksV2.set(i, this.#clock());
  }

  /** Whether addrs[i] is to be sent version 3 now. */
  #speaksV3(i: number): boolean {
    const since = this.#speaksV2.get(i);
    if (since === undefined) return true;
    if (this.#clock() - since < VERSION_2_MEMORY_MS) return false;
    this.#speaksV2.delete(i);
    return true;
  }

  /**
   * The leader of election `name` now (its value and the token of its
   * term), or undefined if nobody leads: from the ops API (opsAddrs).
   */
  leader(name: string, opts: { signal?: AbortSignal } = {}): Promise<Leader | undefined> {
    return this.#ops.leader(name, opts.signal);
  }

  /**
   * Follows election `name` without campaigning, as etcd's Observe does:
   * yields the leader when it starts (if one leads), then each new leader
   * as it is granted the name, each once, in order, until `signal` aborts
   * (or the caller stops iterating). It follows the ops API's event stream
   * (opsAddrs), reconnecting by itself with the Client's backoff.
   *
   * @example
   * for await (const l of client.observe("web/primary", { signal })) console.log(l.value, l.token);
   */
  observe(name: string, opts: { signal?: AbortSignal } = {}): AsyncIterable<Leader> {
    return this.#ops.observe(name, opts.signal, (n) => backoff(n, this.#backoff.baseMs, this.#backoff.capMs));
  }

  /** Waits for the lock and resolves with it held. Release it with `held.release()`, or `await using`. */
  async acquire(name: string, opts: AcquireOptions = {}): Promise<Held> {
    const claim = claimOf(opts);
    return new Held(await this.#claimed(name, opts, claim), claim);
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
    const general: ClaimKind = { shared: opts.shared, limit: opts.limit };
    claimOf(general);
    const sorted = order(names);
    for (const [name, kind] of Object.entries(opts.perName ?? {})) {
      if (!sorted.includes(name)) throw new BadRequestError(`perName names ${JSON.stringify(name)}, which is not in the set ${JSON.stringify(sorted)}`);
      const unknown = Object.keys(kind).filter((k) => k !== "shared" && k !== "limit");
      if (unknown.length) throw new BadRequestError(`perName[${JSON.stringify(name)}] has ${JSON.stringify(unknown)}; it takes shared and limit`);
      claimOf(kind);
    }
    const kindOf = (name: string): ClaimKind => (opts.perName && Object.hasOwn(opts.perName, name) ? opts.perName[name] : general);
    return acquireAll(names, (name) => this.acquire(name, { signal: opts.signal, maxHoldMs: opts.maxHoldMs, resume: opts.resume, ...kindOf(name) }));
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
  async campaign(name: string, value: string, opts: Pick<AcquireOptions, "signal" | "onWaiting" | "onWaitState" | "unref" | "resume"> = {}): Promise<Leadership> {
    // An election has one leader: the claim is exclusive whatever opts hold.
    const { signal, onWaiting, onWaitState, unref, resume } = opts;
    return new Leadership(await this.#claimed(name, { signal, onWaiting, onWaitState, unref, resume, owner: value }, undefined), value);
  }

  /**
   * Acquires under the re-entrancy rule: the name counts as in use until its
   * session ends. A claim that this Client's own claims alone would keep
   * waiting is refused: any claim of its own, for an exclusive claim; an
   * exclusive one, or as many shared ones as the limit, for a shared claim.
   */
  async #claimed(name: string, opts: AcquireOptions, claim: wire.Claim | undefined): Promise<Session> {
    // Without resume, an exclusive claim stays the version 1 frame that
    // every server speaks; only a shared one needs version 2. With resume,
    // version 3, and those to a server that answers VERSION to it.
    const owner = opts.owner ?? this.owner;
    const legacy = wire.encodeAcquire(name, this.leaseMs, owner, opts.nowait ?? false, claim);
    if (opts.resume !== undefined && typeof opts.resume !== "boolean") throw new BadRequestError(`resume ${String(opts.resume)} is not true or false`);
    const kind = claim ?? { shared: false, limit: 1 };
    const v3 = (opts.resume ?? this.#resume) ? wire.encodeAcquireV3(name, this.leaseMs, owner, opts.nowait ?? false, kind) : undefined;
    const frames = { legacy, v3, claim: { name, owner, leaseMs: this.leaseMs, ...kind } };
    const maxHoldMs = opts.maxHoldMs;
    if (maxHoldMs !== undefined && !(Number.isFinite(maxHoldMs) && maxHoldMs > 0)) {
      throw new BadRequestError(`maxHoldMs ${maxHoldMs} must be a positive number of milliseconds`);
    }
    const use = this.#inUse.get(name) ?? { exclusive: 0, shared: 0, limit: 0 };
    if (!opts.queueBehindSelf && !opts.nowait) {
      if (!claim && use.exclusive + use.shared > 0) {
        throw new AlreadyHeld(`lock ${JSON.stringify(name)} is already held or awaited through this client (locks are not re-entrant; queueBehindSelf: true queues behind it)`);
      }
      if (claim && (use.exclusive > 0 || (use.shared >= claim.limit && use.limit === claim.limit))) {
        throw new AlreadyHeld(`lock ${JSON.stringify(name)}: this client already holds or awaits ${use.exclusive > 0 ? "an exclusive claim of it" : `all ${claim.limit} slots of it`} (queueBehindSelf: true queues behind them)`);
      }
    }
    if (claim) {
      if (use.shared === 0) use.limit = claim.limit;
      use.shared++;
    } else {
      use.exclusive++;
    }
    this.#inUse.set(name, use);
    const unclaim = () => {
      if (claim) use.shared--;
      else use.exclusive--;
      if (use.exclusive <= 0 && use.shared <= 0 && this.#inUse.get(name) === use) this.#inUse.delete(name);
    };
    let s: Session;
    try {
      s = await this.#acquire(name, frames, opts);
    } catch (e) {
      unclaim();
      if (e instanceof LimitMismatchError && claim) throw new LimitMismatchError(e.serverMessage, claim.limit);
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

  async #acquire(name: string, frames: { legacy: Buffer; v3?: Buffer; claim: SessionOptions["claim"] }, opts: AcquireOptions): Promise<Session> {
    const signal = opts.signal;
    const log = this.#log;
    let idx = this.#last % this.addrs.length;
    let reached = false;
    let failures = 0;
    let redirects = 0;
    let lastErr: Error | undefined;
    let position = 0;
    // Why the wait ended when signal aborted: its timeout, with the cause
    // that kept the lock from being granted; any other reason as it is.
    const ended = (): unknown => {
      const reason: unknown = signal?.reason;
      if (!(reason instanceof Error) || reason.name !== "TimeoutError" || reason instanceof AcquireTimeoutError) return reason;
      const why = lastErr ? `; last attempt: ${lastErr.message}` : position > 0 ? ` (waiting at position ${position})` : "";
      return new AcquireTimeoutError(`acquire ${JSON.stringify(name)}: no grant before the signal's timeout${why}`, position, lastErr ?? reason);
    };
    const retried = (err: Error) => {
      if (this.#retries !== undefined && failures > this.#retries) throw err;
    };
    for (;;) {
      if (signal?.aborted) throw ended();
      let sock: net.Socket | undefined;
      let raw: net.Socket | undefined;
      for (let k = 0; k < this.addrs.length && !sock; k++) {
        const i = (idx + k) % this.addrs.length;
        try {
          [sock, raw] = await this.#dial(i, signal);
          idx = i;
          log.debug(`baton: connected to ${this.addrs[i]} for ${JSON.stringify(name)}`, { lock: name, addr: this.addrs[i], event: "connect" });
        } catch (e) {
          if (signal?.aborted) throw ended();
          if (e instanceof TLSError) throw e; // a configuration: never retried
          lastErr = e instanceof BatonError ? e : new ConnectionBroken(`cannot reach ${this.addrs[i]}: ${(e as Error).message}`);
          log.debug(`baton: ${lastErr.message}`, { lock: name, addr: this.addrs[i], event: "connect-failed" });
        }
      }
      if (!sock) {
        if (!reached && !this.#waitForServer) throw lastErr!;
        failures++;
        retried(lastErr!);
        await sleep(backoff(failures, this.#backoff.baseMs, this.#backoff.capMs), signal).catch(() => {
          throw ended();
        });
        continue;
      }
      reached = true;
      const v3 = frames.v3 !== undefined && this.#speaksV3(idx);
      const s = new Session(sock, raw!, idx, v3 ? frames.v3! : frames.legacy, {
        reset: !this.#normalClose,
        maxHoldMs: opts.maxHoldMs,
        onWaiting: waitingOf(opts),
        unref: opts.unref ?? this.#unref,
        log,
        clock: this.#clock,
        v3,
        claim: frames.claim,
        mover: this.#mover,
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
      position = s.position;
      if (s.state !== "ended") {
        await s.close();
        throw ended();
      }
      if (signal?.aborted) {
        await s.close();
        throw ended();
      }
      const err = s.error!;
      if (err instanceof LockLost) throw err; // granted and lost before it could be handed over
      idx = s.addrIndex; // a waiter that moved ended elsewhere
      if (err instanceof VersionError && v3) {
        // A server of an older version: the same claim in version 1 or 2, at once, on a new connection.
        this.#rememberV2(idx);
        continue;
      }
      lastErr = err;
      if (s.replied) failures = 0;
      failures++;
      let atOnce = false;
      const here = this.addrs[idx];
      if (err instanceof ResumeRefusedError) {
        // A waiter's place that could not be carried over: a new place, at once.
        atOnce = failures <= 1;
      } else if (err instanceof NotLeaderError) {
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
      retried(err);
      const pause = atOnce ? 0 : backoff(failures, this.#backoff.baseMs, this.#backoff.capMs);
      log.info(`baton: waiting for ${JSON.stringify(name)}: ${err.message}; reconnecting in ${Math.round(pause)} ms`, { lock: name, addr: here, event: "reconnect" });
      if (pause > 0) {
        await sleep(pause, signal).catch(() => {
          throw ended();
        });
      }
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
      const addr = this.addrs[i];
      function fail(e: Error) {
        cleanup();
        sock.destroy();
        raw.destroy();
        reject(isTLSFailure(e) ? new TLSError(`TLS handshake with ${addr}: ${e.message}`, { cause: e }) : e);
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
