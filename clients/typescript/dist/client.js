"use strict";
/** The Baton client: named locks where the TCP connection is the claim. */
var __createBinding = (this && this.__createBinding) || (Object.create ? (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    var desc = Object.getOwnPropertyDescriptor(m, k);
    if (!desc || ("get" in desc ? !m.__esModule : desc.writable || desc.configurable)) {
      desc = { enumerable: true, get: function() { return m[k]; } };
    }
    Object.defineProperty(o, k2, desc);
}) : (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    o[k2] = m[k];
}));
var __setModuleDefault = (this && this.__setModuleDefault) || (Object.create ? (function(o, v) {
    Object.defineProperty(o, "default", { enumerable: true, value: v });
}) : function(o, v) {
    o["default"] = v;
});
var __importStar = (this && this.__importStar) || (function () {
    var ownKeys = function(o) {
        ownKeys = Object.getOwnPropertyNames || function (o) {
            var ar = [];
            for (var k in o) if (Object.prototype.hasOwnProperty.call(o, k)) ar[ar.length] = k;
            return ar;
        };
        return ownKeys(o);
    };
    return function (mod) {
        if (mod && mod.__esModule) return mod;
        var result = {};
        if (mod != null) for (var k = ownKeys(mod), i = 0; i < k.length; i++) if (k[i] !== "default") __createBinding(result, mod, k[i]);
        __setModuleDefault(result, mod);
        return result;
    };
})();
Object.defineProperty(exports, "__esModule", { value: true });
exports.Client = exports.READER_LIMIT = exports.DEFAULT_DIAL_TIMEOUT_MS = exports.DEFAULT_LEASE_MS = void 0;
const net = __importStar(require("node:net"));
const os = __importStar(require("node:os"));
const tls = __importStar(require("node:tls"));
const clock_js_1 = require("./clock.js");
const election_js_1 = require("./election.js");
const errors_js_1 = require("./errors.js");
const held_js_1 = require("./held.js");
const log_js_1 = require("./log.js");
const many_js_1 = require("./many.js");
const ops_js_1 = require("./ops.js");
const session_js_1 = require("./session.js");
const wire = __importStar(require("./wire.js"));
exports.DEFAULT_LEASE_MS = 10_000;
exports.DEFAULT_DIAL_TIMEOUT_MS = 5_000;
/**
 * The limit of a reader's claim (`shared: true` without a limit): the
 * largest the protocol carries, as close to "no limit" as a shared claim
 * gets. Every reader of a name must give the same limit, so it is one fixed
 * number, the same in every Baton client.
 */
exports.READER_LIMIT = wire.MAX_LIMIT;
/** Redirects (NOT_LEADER with a hint on the list) followed at once before backing off. */
const REDIRECT_BUDGET = 3;
/** How long an address that answered VERSION to version 3 is sent version 1 and 2 only; then version 3 is tried again (an upgrade). */
const VERSION_2_MEMORY_MS = 60_000;
/** The version 2 fields of a claim from its options, or undefined for an exclusive claim (version 1). */
function claimOf(opts) {
    if (opts.shared !== undefined && typeof opts.shared !== "boolean")
        throw new errors_js_1.BadRequestError(`shared ${String(opts.shared)} is not true or false`);
    if (opts.limit !== undefined)
        return { shared: true, limit: wire.checkLimit(opts.limit) };
    return opts.shared ? { shared: true, limit: exports.READER_LIMIT } : undefined;
}
function splitAddr(addr) {
    const i = addr.lastIndexOf(":");
    const port = Number(addr.slice(i + 1));
    let host = addr.slice(0, i);
    if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535)
        throw new errors_js_1.BadRequestError(`address ${JSON.stringify(addr)} is not host:port`);
    if (host.startsWith("[") && host.endsWith("]"))
        host = host.slice(1, -1);
    return [host, port];
}
function defaultOwner() {
    const owner = `${os.hostname()}:${process.pid}`;
    try {
        wire.checkOwner(owner);
        return owner;
    }
    catch {
        return `pid:${process.pid}`;
    }
}
/** Jittered exponential backoff: base doubling up to cap, times 0.5-1. */
function backoff(failures, baseMs = 50, capMs = 2000) {
    return Math.min(baseMs * 2 ** Math.min(Math.max(failures - 1, 0), 32), capMs) * (0.5 + Math.random() / 2);
}
/** Whether a dial's error is TLS's: a certificate this client does not accept. */
function isTLSFailure(e) {
    return /CERT|SELF_SIGNED|ERR_TLS|ERR_SSL|UNABLE_TO_(VERIFY|GET)/.test(String(e.code ?? "")) || /certificate/i.test(e.message);
}
/** The position callback of a claim: onWaiting, onWaitState, both or none. */
function waitingOf(opts) {
    const { onWaiting, onWaitState } = opts;
    if (!onWaitState)
        return onWaiting;
    return (position) => {
        onWaiting?.(position);
        onWaitState({ position });
    };
}
function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(signal.reason);
        const t = setTimeout(() => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
        }, ms);
        const onAbort = () => {
            clearTimeout(t);
            reject(signal.reason);
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
class Client {
    addrs;
    owner;
    leaseMs;
    #hosts;
    #tls;
    #dialTimeoutMs;
    #normalClose;
    #log;
    #unref;
    #waitForServer;
    #backoff;
    #retries;
    #ops;
    #resume;
    /** The addresses that answered VERSION to version 3, with when (on #clock): sent version 1 and 2 for VERSION_2_MEMORY_MS. */
    #speaksV2 = new Map();
    /** How claims reach the servers when they move. */
    #mover;
    /** Per name, this Client's claims under way or held: exclusive, shared, and the shared ones' limit. */
    #inUse = new Map();
    #last = 0;
    /** The clock of every lock's deadline (clock.ts): it counts a suspend of the machine. */
    #clock = new clock_js_1.WallChecked().now;
    constructor(addrs, opts = {}) {
        const list = typeof addrs === "string" ? addrs.split(",").map((a) => a.trim()).filter(Boolean) : [...addrs];
        if (list.length === 0)
            throw new errors_js_1.BadRequestError("no server address");
        this.addrs = list;
        this.#hosts = list.map(splitAddr);
        this.leaseMs = wire.checkLeaseMs(opts.leaseMs ?? exports.DEFAULT_LEASE_MS);
        this.owner = opts.owner ?? defaultOwner();
        wire.checkOwner(this.owner);
        this.#tls = opts.tls;
        this.#dialTimeoutMs = opts.dialTimeoutMs ?? exports.DEFAULT_DIAL_TIMEOUT_MS;
        this.#normalClose = opts.normalClose ?? false;
        this.#log = (0, log_js_1.safeLogger)(opts.logger);
        this.#unref = opts.unref ?? false;
        this.#waitForServer = opts.waitForServer ?? false;
        this.#backoff = opts.backoff ?? { baseMs: 50, capMs: 2000 };
        if (!(this.#backoff.baseMs > 0 && this.#backoff.capMs >= this.#backoff.baseMs)) {
            throw new errors_js_1.BadRequestError(`backoff ${JSON.stringify(this.#backoff)}: baseMs must be positive and at most capMs`);
        }
        this.#retries = opts.retries;
        if (this.#retries !== undefined && !(Number.isInteger(this.#retries) && this.#retries >= 0)) {
            throw new errors_js_1.BadRequestError(`retries ${this.#retries} is not a whole number >= 0`);
        }
        this.#ops = new ops_js_1.OpsAPI(opts.opsAddrs ?? [], opts.adminToken, opts.tls);
        if (opts.resume !== undefined && typeof opts.resume !== "boolean")
            throw new errors_js_1.BadRequestError(`resume ${String(opts.resume)} is not true or false`);
        this.#resume = opts.resume ?? true;
        this.#mover = {
            addrs: this.addrs,
            dial: (i, signal) => this.#dial(i, signal),
            speaksV2: (i) => this.#rememberV2(i),
        };
    }
    /** addrs[i] answered VERSION to version 3: send it versions 1 and 2 for a while. */
    #rememberV2(i) {
        if (!this.#speaksV2.has(i)) {
            this.#log.info(`baton: ${this.addrs[i]} does not speak protocol version 3; sending it versions 1 and 2 for ${VERSION_2_MEMORY_MS / 1000} s (claims there cannot move to another server)`, { addr: this.addrs[i], event: "version-fallback" });
        }
        this.#speaksV2.set(i, this.#clock());
    }
    /** Whether addrs[i] is to be sent version 3 now. */
    #speaksV3(i) {
        const since = this.#speaksV2.get(i);
        if (since === undefined)
            return true;
        if (this.#clock() - since < VERSION_2_MEMORY_MS)
            return false;
        this.#speaksV2.delete(i);
        return true;
    }
    /**
     * The leader of election `name` now (its value and the token of its
     * term), or undefined if nobody leads: from the ops API (opsAddrs).
     */
    leader(name, opts = {}) {
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
    observe(name, opts = {}) {
        return this.#ops.observe(name, opts.signal, (n) => backoff(n, this.#backoff.baseMs, this.#backoff.capMs));
    }
    /** Waits for the lock and resolves with it held. Release it with `held.release()`, or `await using`. */
    async acquire(name, opts = {}) {
        const claim = claimOf(opts);
        return new held_js_1.Held(await this.#claimed(name, opts, claim), claim);
    }
    /**
     * Runs fn while holding the lock, and releases it after. fn gets a signal
     * aborted when the client sees the loss; ask `held.check()` before each
     * step that touches the guarded resource. withLock rejects with a
     * LockLost if ownership ended while fn ran (when fn itself failed, its
     * error is the LockLost's cause).
     */
    async withLock(name, fn, opts = {}) {
        const held = await this.acquire(name, opts);
        let result;
        try {
            result = await fn(held.signal, held);
        }
        catch (e) {
            throw await (0, held_js_1.failure)(held, e);
        }
        await held.release();
        return result;
    }
    /**
     * Holds every name or none: acquires them in sorted order (so two callers
     * with overlapping sets cannot deadlock), and on any failure releases the
     * ones it holds. The HeldMany's signal is aborted when any one is lost.
     */
    async acquireMany(names, opts = {}) {
        const general = { shared: opts.shared, limit: opts.limit };
        claimOf(general);
        const sorted = (0, many_js_1.order)(names);
        for (const [name, kind] of Object.entries(opts.perName ?? {})) {
            if (!sorted.includes(name))
                throw new errors_js_1.BadRequestError(`perName names ${JSON.stringify(name)}, which is not in the set ${JSON.stringify(sorted)}`);
            const unknown = Object.keys(kind).filter((k) => k !== "shared" && k !== "limit");
            if (unknown.length)
                throw new errors_js_1.BadRequestError(`perName[${JSON.stringify(name)}] has ${JSON.stringify(unknown)}; it takes shared and limit`);
            claimOf(kind);
        }
        const kindOf = (name) => (opts.perName && Object.hasOwn(opts.perName, name) ? opts.perName[name] : general);
        return (0, many_js_1.acquireAll)(names, (name) => this.acquire(name, { signal: opts.signal, maxHoldMs: opts.maxHoldMs, resume: opts.resume, ...kindOf(name) }));
    }
    /** Runs fn while holding every name (see acquireMany and withLock). */
    async withLocks(names, fn, opts = {}) {
        const many = await this.acquireMany(names, opts);
        let result;
        try {
            result = await fn(many.signal, many);
        }
        catch (e) {
            throw await (0, held_js_1.failure)(many, e);
        }
        await many.release();
        return result;
    }
    /**
     * Waits until this candidate leads `name`, with `value` as the owner text
     * operators see, and resolves with the Leadership; `resign()` gives it up
     * and the next candidate leads at once.
     */
    async campaign(name, value, opts = {}) {
        // An election has one leader: the claim is exclusive whatever opts hold.
        const { signal, onWaiting, onWaitState, unref, resume } = opts;
        return new election_js_1.Leadership(await this.#claimed(name, { signal, onWaiting, onWaitState, unref, resume, owner: value }, undefined), value);
    }
    /**
     * Acquires under the re-entrancy rule: the name counts as in use until its
     * session ends. A claim that this Client's own claims alone would keep
     * waiting is refused: any claim of its own, for an exclusive claim; an
     * exclusive one, or as many shared ones as the limit, for a shared claim.
     */
    async #claimed(name, opts, claim) {
        // Without resume, an exclusive claim stays the version 1 frame that
        // every server speaks; only a shared one needs version 2. With resume,
        // version 3, and those to a server that answers VERSION to it.
        const owner = opts.owner ?? this.owner;
        const legacy = wire.encodeAcquire(name, this.leaseMs, owner, opts.nowait ?? false, claim);
        if (opts.resume !== undefined && typeof opts.resume !== "boolean")
            throw new errors_js_1.BadRequestError(`resume ${String(opts.resume)} is not true or false`);
        const kind = claim ?? { shared: false, limit: 1 };
        const v3 = (opts.resume ?? this.#resume) ? wire.encodeAcquireV3(name, this.leaseMs, owner, opts.nowait ?? false, kind) : undefined;
        const frames = { legacy, v3, claim: { name, owner, leaseMs: this.leaseMs, ...kind } };
        const maxHoldMs = opts.maxHoldMs;
        if (maxHoldMs !== undefined && !(Number.isFinite(maxHoldMs) && maxHoldMs > 0)) {
            throw new errors_js_1.BadRequestError(`maxHoldMs ${maxHoldMs} must be a positive number of milliseconds`);
        }
        const use = this.#inUse.get(name) ?? { exclusive: 0, shared: 0, limit: 0 };
        if (!opts.queueBehindSelf && !opts.nowait) {
            if (!claim && use.exclusive + use.shared > 0) {
                throw new errors_js_1.AlreadyHeld(`lock ${JSON.stringify(name)} is already held or awaited through this client (locks are not re-entrant; queueBehindSelf: true queues behind it)`);
            }
            if (claim && (use.exclusive > 0 || (use.shared >= claim.limit && use.limit === claim.limit))) {
                throw new errors_js_1.AlreadyHeld(`lock ${JSON.stringify(name)}: this client already holds or awaits ${use.exclusive > 0 ? "an exclusive claim of it" : `all ${claim.limit} slots of it`} (queueBehindSelf: true queues behind them)`);
            }
        }
        if (claim) {
            if (use.shared === 0)
                use.limit = claim.limit;
            use.shared++;
        }
        else {
            use.exclusive++;
        }
        this.#inUse.set(name, use);
        const unclaim = () => {
            if (claim)
                use.shared--;
            else
                use.exclusive--;
            if (use.exclusive <= 0 && use.shared <= 0 && this.#inUse.get(name) === use)
                this.#inUse.delete(name);
        };
        let s;
        try {
            s = await this.#acquire(name, frames, opts);
        }
        catch (e) {
            unclaim();
            if (e instanceof errors_js_1.LimitMismatchError && claim)
                throw new errors_js_1.LimitMismatchError(e.serverMessage, claim.limit);
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
    async #acquire(name, frames, opts) {
        const signal = opts.signal;
        const log = this.#log;
        let idx = this.#last % this.addrs.length;
        let reached = false;
        let failures = 0;
        let redirects = 0;
        let lastErr;
        let position = 0;
        // Why the wait ended when signal aborted: its timeout, with the cause
        // that kept the lock from being granted; any other reason as it is.
        const ended = () => {
            const reason = signal?.reason;
            if (!(reason instanceof Error) || reason.name !== "TimeoutError" || reason instanceof errors_js_1.AcquireTimeoutError)
                return reason;
            const why = lastErr ? `; last attempt: ${lastErr.message}` : position > 0 ? ` (waiting at position ${position})` : "";
            return new errors_js_1.AcquireTimeoutError(`acquire ${JSON.stringify(name)}: no grant before the signal's timeout${why}`, position, lastErr ?? reason);
        };
        const retried = (err) => {
            if (this.#retries !== undefined && failures > this.#retries)
                throw err;
        };
        for (;;) {
            if (signal?.aborted)
                throw ended();
            let sock;
            let raw;
            for (let k = 0; k < this.addrs.length && !sock; k++) {
                const i = (idx + k) % this.addrs.length;
                try {
                    [sock, raw] = await this.#dial(i, signal);
                    idx = i;
                    log.debug(`baton: connected to ${this.addrs[i]} for ${JSON.stringify(name)}`, { lock: name, addr: this.addrs[i], event: "connect" });
                }
                catch (e) {
                    if (signal?.aborted)
                        throw ended();
                    if (e instanceof errors_js_1.TLSError)
                        throw e; // a configuration: never retried
                    lastErr = e instanceof errors_js_1.BatonError ? e : new errors_js_1.ConnectionBroken(`cannot reach ${this.addrs[i]}: ${e.message}`);
                    log.debug(`baton: ${lastErr.message}`, { lock: name, addr: this.addrs[i], event: "connect-failed" });
                }
            }
            if (!sock) {
                if (!reached && !this.#waitForServer)
                    throw lastErr;
                failures++;
                retried(lastErr);
                await sleep(backoff(failures, this.#backoff.baseMs, this.#backoff.capMs), signal).catch(() => {
                    throw ended();
                });
                continue;
            }
            reached = true;
            const v3 = frames.v3 !== undefined && this.#speaksV3(idx);
            const s = new session_js_1.Session(sock, raw, idx, v3 ? frames.v3 : frames.legacy, {
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
            await new Promise((resolve) => {
                if (s.state !== "waiting")
                    return resolve();
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
            const err = s.error;
            if (err instanceof errors_js_1.LockLost)
                throw err; // granted and lost before it could be handed over
            idx = s.addrIndex; // a waiter that moved ended elsewhere
            if (err instanceof errors_js_1.VersionError && v3) {
                // A server of an older version: the same claim in version 1 or 2, at once, on a new connection.
                this.#rememberV2(idx);
                continue;
            }
            lastErr = err;
            if (s.replied)
                failures = 0;
            failures++;
            let atOnce = false;
            const here = this.addrs[idx];
            if (err instanceof errors_js_1.ResumeRefusedError) {
                // A waiter's place that could not be carried over: a new place, at once.
                atOnce = failures <= 1;
            }
            else if (err instanceof errors_js_1.NotLeaderError) {
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
            }
            else if (err instanceof errors_js_1.ShutdownError) {
                idx = (idx + 1) % this.addrs.length; // this one is going away
                atOnce = failures <= 1;
            }
            else if (err instanceof errors_js_1.LeaseExpiredError) {
                atOnce = failures <= 1;
            }
            else if (err instanceof errors_js_1.ServerError && err.serverCondition) {
                // OVERLOADED, and conditions not yet named: back off
            }
            else if (err instanceof errors_js_1.Unconfirmed || err instanceof errors_js_1.ConnectionBroken) {
                idx = (idx + 1) % this.addrs.length;
            }
            else {
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
    #dial(i, signal) {
        const [host, port] = this.#hosts[i];
        return new Promise((resolve, reject) => {
            const raw = net.connect({ host, port });
            const sock = this.#tls
                ? tls.connect({ ...this.#tls, socket: raw, host, port, servername: this.#tls.servername ?? (net.isIP(host) ? undefined : host) })
                : raw;
            const event = this.#tls ? "secureConnect" : "connect";
            const timer = setTimeout(() => fail(new errors_js_1.ConnectionBroken(`dial ${this.addrs[i]}: timed out after ${this.#dialTimeoutMs}ms`)), this.#dialTimeoutMs);
            const onAbort = () => fail(signal.reason);
            const cleanup = () => {
                clearTimeout(timer);
                signal?.removeEventListener("abort", onAbort);
                sock.removeListener("error", fail);
            };
            const addr = this.addrs[i];
            function fail(e) {
                cleanup();
                sock.destroy();
                raw.destroy();
                reject(isTLSFailure(e) ? new errors_js_1.TLSError(`TLS handshake with ${addr}: ${e.message}`, { cause: e }) : e);
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
exports.Client = Client;
