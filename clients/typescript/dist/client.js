/** The Baton client: named locks where the TCP connection is the claim. */
import * as net from "node:net";
import * as os from "node:os";
import * as tls from "node:tls";
import { BadRequestError, BatonError, ConnectionBroken, LeaseExpiredError, LockLost, NotLeaderError, ServerError, ShutdownError, Unconfirmed, } from "./errors.js";
import { Session } from "./session.js";
import * as wire from "./wire.js";
export const DEFAULT_LEASE_MS = 10_000;
export const DEFAULT_DIAL_TIMEOUT_MS = 5_000;
/** Redirects (NOT_LEADER with a hint on the list) followed at once before backing off. */
const REDIRECT_BUDGET = 3;
/** A lock held by this process: the claim is its connection. */
export class Held {
    session;
    /** The lock's name. */
    name;
    /** The fencing token of this grant: pass it to the guarded resource. */
    token;
    /** Aborted the moment ownership ends (its reason is a LockLost); never by release. */
    signal;
    constructor(session) {
        this.session = session;
        this.name = session.name;
        this.token = session.token;
        this.signal = session.controller.signal;
    }
    /** Throws the LockLost once ownership has ended. */
    check() {
        if (this.signal.aborted)
            throw this.signal.reason;
    }
    /** Closes the session: the release. The next waiter is promoted at once. Idempotent. */
    async release() {
        await this.session.close();
    }
}
function splitAddr(addr) {
    const i = addr.lastIndexOf(":");
    const port = Number(addr.slice(i + 1));
    let host = addr.slice(0, i);
    if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535)
        throw new BadRequestError(`address ${JSON.stringify(addr)} is not host:port`);
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
/** Jittered exponential backoff: 50 ms doubling up to 2 s, times 0.5-1. */
function backoff(failures) {
    return Math.min(50 * 2 ** Math.max(failures - 1, 0), 2000) * (0.5 + Math.random() / 2);
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
 */
export class Client {
    addrs;
    owner;
    leaseMs;
    hosts;
    tls;
    dialTimeoutMs;
    normalClose;
    last = 0;
    constructor(addrs, opts = {}) {
        const list = typeof addrs === "string" ? addrs.split(",").map((a) => a.trim()).filter(Boolean) : [...addrs];
        if (list.length === 0)
            throw new BadRequestError("no server address");
        this.addrs = list;
        this.hosts = list.map(splitAddr);
        this.leaseMs = wire.checkLeaseMs(opts.leaseMs ?? DEFAULT_LEASE_MS);
        this.owner = opts.owner ?? defaultOwner();
        wire.checkOwner(this.owner);
        this.tls = opts.tls;
        this.dialTimeoutMs = opts.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS;
        this.normalClose = opts.normalClose ?? false;
    }
    /** Waits for the lock and resolves with it held. Release it with `held.release()`. */
    async acquire(name, opts = {}) {
        const frame = wire.encodeAcquire(name, this.leaseMs, this.owner, opts.nowait ?? false);
        const signal = opts.signal;
        let idx = this.last % this.addrs.length;
        let reached = false;
        let failures = 0;
        let redirects = 0;
        let lastErr;
        for (;;) {
            if (signal?.aborted)
                throw signal.reason;
            let sock;
            let raw;
            for (let k = 0; k < this.addrs.length && !sock; k++) {
                const i = (idx + k) % this.addrs.length;
                try {
                    [sock, raw] = await this.dial(i, signal);
                    idx = i;
                }
                catch (e) {
                    if (signal?.aborted)
                        throw signal.reason;
                    lastErr = e instanceof BatonError ? e : new ConnectionBroken(`cannot reach ${this.addrs[i]}: ${e.message}`);
                }
            }
            if (!sock) {
                if (!reached)
                    throw lastErr;
                failures++;
                await sleep(backoff(failures), signal);
                continue;
            }
            reached = true;
            const s = new Session(sock, raw, this.addrs[idx], name, this.leaseMs, frame, !this.normalClose);
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
                this.last = idx;
                return new Held(s);
            }
            if (s.state !== "ended") {
                await s.close();
                throw signal.reason;
            }
            if (signal?.aborted) {
                await s.close();
                throw signal.reason;
            }
            const err = s.error;
            if (err instanceof LockLost)
                throw err; // granted and lost before it could be handed over
            lastErr = err;
            if (s.replied)
                failures = 0;
            failures++;
            let atOnce = false;
            if (err instanceof NotLeaderError) {
                const hint = err.serverMessage;
                if (this.addrs.includes(hint) && redirects < REDIRECT_BUDGET) {
                    idx = this.addrs.indexOf(hint);
                    redirects++;
                    failures--;
                    continue;
                }
                idx = (idx + 1) % this.addrs.length;
            }
            else if (err instanceof ShutdownError) {
                idx = (idx + 1) % this.addrs.length; // this one is going away
                atOnce = failures <= 1;
            }
            else if (err instanceof LeaseExpiredError) {
                atOnce = failures <= 1;
            }
            else if (err instanceof ServerError && err.serverCondition) {
                // OVERLOADED, and conditions not yet named: back off
            }
            else if (err instanceof Unconfirmed || err instanceof ConnectionBroken) {
                idx = (idx + 1) % this.addrs.length;
            }
            else {
                throw err;
            }
            redirects = 0;
            if (!atOnce)
                await sleep(backoff(failures), signal);
        }
    }
    /**
     * Runs fn while holding the lock, and releases it after. fn gets a signal
     * aborted the moment ownership ends; withLock rejects with LockLost if
     * ownership ended while fn ran.
     */
    async withLock(name, fn, opts = {}) {
        const held = await this.acquire(name, opts);
        let result;
        try {
            result = await fn(held.signal, held);
        }
        catch (e) {
            await held.release();
            if (held.signal.aborted)
                throw held.signal.reason;
            throw e;
        }
        await held.release();
        if (held.signal.aborted)
            throw held.signal.reason;
        return result;
    }
    /**
     * Connects to address i: the socket that carries the protocol (TLS or
     * TCP), and the TCP socket under it, which a release resets (a TLS
     * socket cannot be reset itself).
     */
    dial(i, signal) {
        const [host, port] = this.hosts[i];
        return new Promise((resolve, reject) => {
            const raw = net.connect({ host, port });
            const sock = this.tls
                ? tls.connect({ ...this.tls, socket: raw, host, port, servername: this.tls.servername ?? (net.isIP(host) ? undefined : host) })
                : raw;
            const event = this.tls ? "secureConnect" : "connect";
            const timer = setTimeout(() => fail(new ConnectionBroken(`dial ${this.addrs[i]}: timed out after ${this.dialTimeoutMs}ms`)), this.dialTimeoutMs);
            const onAbort = () => fail(signal.reason);
            const cleanup = () => {
                clearTimeout(timer);
                signal?.removeEventListener("abort", onAbort);
                sock.removeListener("error", fail);
            };
            function fail(e) {
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
