"use strict";
/**
 * One claim on one lock (internal): one connection at a time, or, while
 * the claim moves to another server (protocol version 3, docs/protocol.md
 * section 14), the claim's connection, its open resume attempts and the
 * connections it has left.
 */
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
exports.Session = exports.Schedule = exports.MIN_HEARTBEAT_INTERVAL_MS = exports.REDIRECT_BUDGET = exports.Violation = void 0;
const node_perf_hooks_1 = require("node:perf_hooks");
const node_util_1 = require("node:util");
const conn_js_1 = require("./conn.js");
Object.defineProperty(exports, "Violation", { enumerable: true, get: function () { return conn_js_1.Violation; } });
const move_js_1 = require("./move.js");
const errors_js_1 = require("./errors.js");
const wire = __importStar(require("./wire.js"));
var move_js_2 = require("./move.js");
Object.defineProperty(exports, "REDIRECT_BUDGET", { enumerable: true, get: function () { return move_js_2.REDIRECT_BUDGET; } });
/** The floor of the heartbeat interval, in ms (see the Go client's heartbeat.go). */
exports.MIN_HEARTBEAT_INTERVAL_MS = 1;
/**
 * The heartbeat schedule of docs/protocol.md: base = lease/4; timeout = 0.8 ×
 * lease; srtt an EWMA (alpha 0.2) of reply round trips, the first sample
 * taken whole; interval = clamp(base − 2 × srtt, min, base), from the reply.
 */
class Schedule {
    leaseMs;
    srtt = 0;
    samples = 0;
    constructor(leaseMs) {
        this.leaseMs = leaseMs;
    }
    observe(rtt) {
        rtt = Math.max(rtt, 0);
        this.srtt = this.samples === 0 ? rtt : (4 * this.srtt + rtt) / 5;
        this.samples++;
    }
    /** A new connection: its first round trip is the first sample. */
    restart(rtt) {
        this.samples = 0;
        this.observe(rtt);
    }
    get timeout() {
        return this.leaseMs * 0.8;
    }
    interval() {
        const base = this.leaseMs / 4;
        return Math.min(Math.max(base - 2 * this.srtt, Math.min(exports.MIN_HEARTBEAT_INTERVAL_MS, base)), base);
    }
}
exports.Schedule = Schedule;
/**
 * A claim. Each connection's 'data' handler is its permanent reader (a
 * promotion push is seen the moment it arrives); one timer is the claim's
 * clock: the next heartbeat on the claim's connection (at most one in
 * flight), the reply a quarter lease late, the holder's move on silence,
 * the deadline (0.8 × lease from the send of the last request the server
 * answered) and the hold limit. A blocked event loop runs no timer, so
 * `expireIfLate` lets any question about the lock read the clock itself.
 *
 * Every time kept here is a reading of `opts.clock`, which counts a suspend
 * of the machine; the timer counts the monotonic clock, which does not, and
 * after a suspend fires late: the tick reads the clock, and never takes
 * the timer's firing for the deadline.
 *
 * A claim of version 3 that the server gave a credential moves when its
 * server ended the claim's connection on purpose or went away (an ERROR of
 * a server condition, the end of the stream, silence), keeping its token
 * or its place; it never moves after a reset, and a holder never past its
 * deadline (section 14, "The client").
 */
class Session {
    opts;
    state = "waiting";
    token = 0n;
    /** A waiter's place, when its server gave it a credential; 0 otherwise. */
    ticket = 0n;
    /** The generation of the credential. */
    generation = 0;
    position = 0;
    replied = false;
    /** Why it ended; undefined after a release. */
    error;
    /** The loss's reason, once held and lost. */
    cause;
    controller = new AbortController();
    sched;
    name;
    /** The claim's credential: a private field, so that inspecting the session never shows it. */
    #credential;
    /** The claim's connection; none while a move has closed it and adopted nothing yet. */
    #conn;
    /** The index of the address of the claim's connection (or of the last one). */
    #idx;
    #connNumber = 0;
    #lastAttempt = 0;
    #attempts = new Set();
    #left = new Set();
    #move;
    #dials = new AbortController();
    /** What a move asks of this claim. */
    #host;
    sentAt = 0;
    deadline = 0;
    pending = true;
    nextBeat;
    missAt;
    silenceAt;
    holdUntil;
    closing = false;
    timer;
    listeners = [];
    constructor(sock, raw, idx, acquire, opts) {
        this.opts = opts;
        this.name = opts.claim.name;
        this.sched = new Schedule(opts.claim.leaseMs);
        this.#idx = idx;
        this.#host = {
            leaseMs: opts.claim.leaseMs,
            addrCount: opts.mover.addrs.length,
            unrefTimers: () => !!this.opts.unref && this.state === "held",
            clock: () => this.opts.clock(),
            openAttempts: () => this.#attempts,
            mayGoOn: () => {
                if (this.state === "ended" || this.closing)
                    return false;
                if (this.state === "held" && this.opts.clock() >= this.deadline) {
                    this.end(this.unconfirmed()); // never a resume past a holder's deadline
                    return false;
                }
                return true;
            },
            attempt: (m, i) => this.attempt(m, i),
        };
        const c = this.#newConn(sock, raw, idx, 0, "claim");
        this.#conn = c;
        this.sentAt = opts.clock();
        c.sentAt = this.sentAt;
        this.deadline = this.sentAt + this.sched.timeout;
        this.arm();
        c.write(acquire);
    }
    /** The address of the claim's connection (or of the last one it had). */
    get addr() {
        return this.opts.mover.addrs[this.#idx];
    }
    /** The index of that address in the client's list. */
    get addrIndex() {
        return this.#idx;
    }
    /** The TCP socket of the claim's connection (tests read its ports). */
    get raw() {
        return this.#conn?.raw;
    }
    /** Whether the claim can move: version 3, with a credential and its token or ticket. */
    get resumable() {
        return this.opts.v3 && this.#credential !== undefined && (this.state === "held" ? this.token : this.ticket) !== 0n;
    }
    /** Calls f at every change of state (held, ended). */
    onChange(f) {
        this.listeners.push(f);
        return () => {
            this.listeners = this.listeners.filter((g) => g !== f);
        };
    }
    /** The performance.now() from which the lock must be taken as lost: the time left now, from now. */
    validUntil() {
        const until = this.holdUntil === undefined ? this.deadline : Math.min(this.deadline, this.holdUntil);
        return node_perf_hooks_1.performance.now() + (until - this.opts.clock());
    }
    /** Ends a held lock whose deadline has passed: the clock decides, not whether a timer has run. */
    expireIfLate() {
        if (this.state !== "held")
            return;
        const late = this.overdue(this.opts.clock());
        if (late)
            this.end(late);
    }
    /**
     * Ends the claim from outside: the release, or giving up the place in the
     * queue. Every connection of the claim (its own, the open attempts of a
     * move, those it has left) is closed at once, with a reset (RST, the
     * default: the TCP socket under TLS, without close_notify) or a FIN
     * (normalClose): a server that took the claim over sees the close, and
     * one that has not answered a resume yet takes nothing. Ends the client
     * did not choose close with a FIN (end).
     */
    async close() {
        if (this.state !== "ended")
            this.closing = true;
        this.stopMove();
        this.#dials.abort(new errors_js_1.ConnectionBroken("released"));
        const all = this.#all();
        for (const c of all)
            c.close(this.opts.reset);
        await Promise.all(all.map((c) => c.closed));
        this.end(new errors_js_1.ConnectionBroken("closed"));
    }
    [node_util_1.inspect.custom]() {
        return `Session { ${JSON.stringify(this.name)} ${this.state} }`;
    }
    notify() {
        for (const f of [...this.listeners])
            f();
    }
    #all() {
        return [...(this.#conn ? [this.#conn] : []), ...this.#attempts, ...this.#left];
    }
    #newConn(sock, raw, idx, number, role) {
        return new conn_js_1.Conn(sock, raw, idx, this.opts.mover.addrs[idx], number, role, this.opts.v3, this.opts.clock, {
            frame: (c, f, at) => this.onFrame(c, f, at),
            ended: (c, how) => this.onEnded(c, how),
        });
    }
    overdue(now) {
        if (now >= this.deadline)
            return this.unconfirmed();
        if (this.state === "held" && this.holdUntil !== undefined && now >= this.holdUntil) {
            return new errors_js_1.MaxHoldReached(`held for the maximum of ${this.opts.maxHoldMs}ms`);
        }
        return undefined;
    }
    /** A waiter's deadline counts only while a connection of it is counted (not while it moves). */
    waiterDue(now) {
        return this.state === "waiting" && this.#move === undefined && now >= this.deadline;
    }
    arm() {
        clearTimeout(this.timer);
        if (this.state === "ended")
            return;
        const now = this.opts.clock();
        let at = now + this.sched.leaseMs / 4;
        const deadline = this.state === "held" || this.#move === undefined ? this.deadline : undefined;
        for (const t of [deadline, this.nextBeat, this.missAt, this.silenceAt, this.holdUntil])
            if (t !== undefined && t < at)
                at = t;
        // Never more than a quarter lease: the timer counts the monotonic clock,
        // and a suspend of the machine makes it late; the tick reads the clock.
        this.timer = setTimeout(() => this.tick(), Math.max(at - now, 0));
        if (this.opts.unref && this.state === "held")
            this.timer.unref();
    }
    tick() {
        if (this.state === "ended")
            return;
        const now = this.opts.clock(); // a timer late by a suspend ends the claim here
        if (this.state === "held") {
            const late = this.overdue(now);
            if (late)
                return this.end(late);
        }
        else if (this.waiterDue(now)) {
            if (!this.resumable)
                return this.end(this.unconfirmed());
            this.waiterMoves();
        }
        const c = this.#conn;
        if (this.missAt !== undefined && now >= this.missAt) {
            this.missAt = undefined;
            this.opts.log.warn(`baton: lock ${JSON.stringify(this.name)}: no reply from ${this.addr} to the heartbeat sent ${Math.round(now - this.sentAt)} ms ago; ` +
                `the claim ends at 0.8 × lease (${this.sched.timeout} ms after that send) unless one comes`, { lock: this.name, addr: this.addr, event: "heartbeat-miss" });
        }
        if (this.silenceAt !== undefined && now >= this.silenceAt) {
            this.silenceAt = undefined;
            if (c && this.pending && this.resumable && this.#move === undefined) {
                this.startMove(`no reply from ${c.addr} to the heartbeat sent ${Math.round(now - this.sentAt)} ms ago`, c.idx + 1, { silence: true });
            }
        }
        if (c && this.nextBeat !== undefined && now >= this.nextBeat) {
            this.sentAt = now;
            this.pending = true;
            this.nextBeat = undefined;
            this.missAt = now + this.sched.leaseMs / 4;
            // Silence: a holder moves once half or more (with jitter) of what is
            // left to its deadline has gone with no reply; a late reply still
            // confirms the claim, and the move leaves the other half.
            this.silenceAt = this.state === "held" && this.resumable ? now + (this.deadline - now) * (0.5 + Math.random() / 8) : undefined;
            c.write(wire.HEARTBEAT);
        }
        this.arm();
    }
    unconfirmed() {
        const s = this.sched;
        return new errors_js_1.Unconfirmed(`no confirmation from the server for ${s.timeout}ms (0.8 × lease ${s.leaseMs}ms)`);
    }
    end(err) {
        if (this.state === "ended")
            return;
        const held = this.state === "held";
        clearTimeout(this.timer);
        this.stopMove();
        this.#dials.abort(err);
        if (this.closing) {
            this.error = undefined;
        }
        else if (held) {
            this.cause = err;
            this.error = new errors_js_1.LockLost(this.name, err);
        }
        else {
            this.error = err;
        }
        this.state = "ended";
        if (held && this.error) {
            const fields = { lock: this.name, addr: this.addr, event: "loss" };
            if (err instanceof errors_js_1.SupersededError) {
                // A conflict: the claim had ended and its end never reached this client.
                this.opts.log.error(`baton: lock ${JSON.stringify(this.name)} lost: ${err.message}: a claim with a higher token won the name (the end of this claim never reached this client: is there a TCP proxy between the client and the servers?)`, fields);
            }
            else {
                this.opts.log.warn(`baton: lock ${JSON.stringify(this.name)} lost: ${err.message}`, fields);
            }
            this.controller.abort(this.error);
        }
        // A claim the client ends on purpose (maxHoldMs) goes as a release does;
        // any other end closes with a FIN.
        const reset = err instanceof errors_js_1.MaxHoldReached && this.opts.reset;
        for (const c of this.#all())
            c.close(reset);
        this.notify();
    }
    /** The claim's connection is gone (closed after its server ended it): nothing confirms until an answer is adopted. */
    dropConn() {
        this.#conn = undefined;
        this.pending = false;
        this.nextBeat = this.missAt = this.silenceAt = undefined;
    }
    onEnded(c, how) {
        if (this.state === "ended")
            return;
        if (c.role === "left") {
            this.#left.delete(c);
            c.close(false);
            return;
        }
        if (c.role === "attempt")
            return this.attemptEnded(c, how);
        // The claim's connection (section 14, "How the claim's connection ends").
        const err = how.error;
        if (how.kind === "error" && err instanceof errors_js_1.MovedError) {
            if ([...this.#attempts].some((a) => a.idx === c.idx)) {
                // Our own move: that attempt took the claim over. Wait for its answer.
                c.close(false);
                this.dropConn();
                this.opts.log.debug(`baton: lock ${JSON.stringify(this.name)}: ${c.addr} moved the claim to this client's own attempt`, { lock: this.name, addr: c.addr, event: "moved-away" });
                return this.arm();
            }
            return this.end(new errors_js_1.MovedError("the claim was resumed on another connection: another client used its credential"));
        }
        const moves = (how.kind === "error" && err.serverCondition) || how.kind === "eof";
        if (!moves || !this.resumable)
            return this.end(err);
        c.close(false);
        this.dropConn();
        let first = c.idx; // after SHUTDOWN or the end of the stream: the same address
        let wait = 0;
        if (err instanceof errors_js_1.NotLeaderError) {
            const hint = this.opts.mover.addrs.indexOf(err.serverMessage);
            first = hint >= 0 ? hint : c.idx + 1;
            if (hint < 0)
                wait = (0, move_js_1.jitter)(1);
        }
        else if (how.kind === "error" && !(err instanceof errors_js_1.ShutdownError)) {
            wait = (0, move_js_1.jitter)(1); // OVERLOADED, or a condition not yet named: back off first
        }
        if (this.state === "waiting")
            wait = Math.max(wait, Math.random() * this.sched.leaseMs / 8);
        this.startMove(`${c.addr} ended the claim's connection (${err.message})`, first, { wait });
        this.arm();
    }
    /** A waiter whose deadline passed moves, keeping its connection but no longer reading it. */
    waiterMoves() {
        const c = this.#conn;
        if (c) {
            c.role = "left";
            this.#left.add(c);
            this.dropConn();
        }
        this.startMove(`no answer from ${this.addr} for 0.8 × lease`, this.#idx + 1, { wait: Math.random() * this.sched.leaseMs / 8 });
    }
    startMove(why, first, o = {}) {
        // Already moving: the claim's connection ended meanwhile; the next attempt goes where it says.
        if (this.#move)
            return this.#move.aim(first);
        const m = new move_js_1.Move(this.#host, this.addr, why, first, o.silence ?? false);
        this.#move = m;
        this.opts.log.info(`baton: lock ${JSON.stringify(this.name)}: ${why}; moving the claim`, { lock: this.name, addr: this.addr, event: "move" });
        m.start(o.wait);
    }
    stopMove() {
        this.#move?.stop();
        this.#move = undefined;
    }
    attempt(m, idx) {
        const addrs = this.opts.mover.addrs;
        this.opts.mover.dial(idx, this.#dials.signal).then(([sock, raw]) => {
            if (this.state === "ended" || this.closing || this.#move !== m) {
                // The move is over: nothing was sent on this one, so closing it takes nothing.
                sock.destroy();
                raw.destroy();
                return;
            }
            // The deadline, right before the send: a resume sent later could be
            // answered, and believed, after it.
            if (this.state === "held" && this.opts.clock() >= this.deadline) {
                sock.destroy();
                raw.destroy();
                return this.end(this.unconfirmed());
            }
            if (this.#lastAttempt >= wire.MAX_ATTEMPT) {
                sock.destroy();
                raw.destroy();
                return this.end(new errors_js_1.BatonError(`the claim has used all ${wire.MAX_ATTEMPT} resume attempts`));
            }
            const number = ++this.#lastAttempt;
            const c = this.#newConn(sock, raw, idx, number, "attempt");
            if (this.opts.unref && this.state === "held")
                c.unref();
            const frame = wire.encodeAcquireV3(this.name, this.sched.leaseMs, this.opts.claim.owner, false, this.opts.claim, {
                held: this.state === "held",
                id: this.state === "held" ? this.token : this.ticket,
                generation: this.generation,
                attempt: number,
                credential: this.#credential,
            });
            c.resume = { held: this.state === "held", id: this.state === "held" ? this.token : this.ticket };
            this.#attempts.add(c);
            this.opts.log.debug(`baton: lock ${JSON.stringify(this.name)}: resume attempt ${number} to ${c.addr}`, { lock: this.name, addr: c.addr, attempt: number, event: "resume-attempt" });
            c.sentAt = this.opts.clock();
            c.write(frame);
            m.sent();
        }, (e) => {
            if (this.state === "ended" || this.closing || this.#move !== m)
                return;
            if (e instanceof errors_js_1.TLSError)
                return this.end(e); // a configuration: never retried
            this.opts.log.debug(`baton: lock ${JSON.stringify(this.name)}: resume attempt to ${addrs[idx]}: cannot connect: ${e.message}`, { lock: this.name, addr: addrs[idx], event: "resume-failed" });
            m.dialFailed();
        });
    }
    /** An open attempt ended before its answer. */
    attemptEnded(c, how) {
        this.#attempts.delete(c);
        c.close(false);
        const err = how.error;
        const atOnce = how.kind === "eof" || (how.kind === "error" && (err.serverCondition || err instanceof errors_js_1.VersionError || err instanceof errors_js_1.MovedError));
        if (!atOnce)
            return this.end(err); // RESUME_REFUSED, BAD_CREDENTIAL, a reset...: the claim is lost
        if (err instanceof errors_js_1.VersionError)
            this.opts.mover.speaksV2(c.idx);
        this.opts.log.debug(`baton: lock ${JSON.stringify(this.name)}: resume attempt ${c.number} to ${c.addr}: ${err.message}`, { lock: this.name, addr: c.addr, attempt: c.number, event: "resume-failed" });
        const m = this.#move;
        if (!m) {
            // An attempt left open after the move ended; if the claim has no
            // connection now (it waited for this attempt after MOVED), move again.
            if (!this.#conn)
                this.startMove(`resume attempt ${c.number} to ${c.addr} ended: ${err.message}`, c.idx + 1);
            return;
        }
        m.ended(err instanceof errors_js_1.NotLeaderError ? this.opts.mover.addrs.indexOf(err.serverMessage) : -1);
    }
    onFrame(c, f, at) {
        if (this.state === "ended")
            return;
        if (c.role === "left")
            return; // nothing on it counts any more
        if (c.role === "attempt")
            return this.answered(c, f, at);
        this.claimFrame(c, f, at);
        this.arm();
    }
    /** An open attempt's first frame: adopt it, ignore it, or lose the claim (section 14, "The move", step 4). */
    answered(c, f, at) {
        this.#attempts.delete(c);
        const held = this.state === "held";
        const sent = c.resume;
        // What the answer must be, from what the resume was (section 14, "The
        // move"): a holder's, ACQUIRED with its token; a waiter's, WAITING with
        // its ticket, or ACQUIRED (granted while it moved).
        const granted = f.type === wire.T_ACQUIRED && !f.push && f.credential !== undefined;
        const valid = sent.held ? granted && f.token === sent.id : granted || (f.type === wire.T_WAITING && f.credential !== undefined && f.ticket === sent.id);
        if (!valid)
            return this.end(new conn_js_1.Violation(`server ${c.addr} answered a ${sent.held ? "holder's" : "waiter's"} resume with ${describe(f)}`));
        // The answer confirms the claim as of the resume's send, and only if it
        // came before the deadline that applies.
        const limit = held ? this.deadline : c.sentAt + this.sched.timeout;
        if (f.type === wire.T_ACQUIRED && at >= limit) {
            return this.end(new errors_js_1.Unconfirmed(`the answer of ${c.addr} to the resume came after the deadline (0.8 × lease ${this.sched.leaseMs}ms)`));
        }
        if (c.number < this.#connNumber) {
            // A late answer to an older attempt: the server moves the claim only up, and ends this one.
            c.role = "left";
            this.#left.add(c);
            return;
        }
        // A waiter granted by an earlier answer: a higher one must hold the same grant.
        if (held && !(granted && f.token === this.token)) {
            return this.end(new conn_js_1.Violation(`server ${c.addr} answered a resume with ${describe(f)} after another granted token ${this.token}`));
        }
        const from = this.#conn;
        if (from) {
            from.role = "left";
            this.#left.add(from);
        }
        c.role = "claim";
        this.#conn = c;
        this.#idx = c.idx;
        this.#connNumber = c.number;
        this.sentAt = c.sentAt;
        this.deadline = c.sentAt + this.sched.timeout;
        this.pending = false;
        this.missAt = this.silenceAt = undefined;
        this.replied = true;
        this.sched.restart(at - c.sentAt);
        this.nextBeat = at + this.sched.interval();
        this.generation = f.generation;
        this.#credential = f.credential;
        if (f.type === wire.T_WAITING) {
            this.position = f.position;
            this.reportPosition(f.position);
        }
        else if (!held) {
            this.ticket = 0n;
            this.grant(f.token, at);
        }
        if (this.opts.unref && this.state === "held")
            c.unref();
        const m = this.#move;
        if (m) {
            this.stopMove();
            const ms = Math.round(this.opts.clock() - m.startedAt);
            this.opts.log.info(`baton: lock ${JSON.stringify(this.name)} moved from ${m.from} to ${c.addr} in ${ms} ms (${m.made} attempt${m.made === 1 ? "" : "s"})`, {
                lock: this.name, from: m.from, addr: c.addr, attempts: m.made, ms, event: "moved",
            });
        }
        else {
            this.opts.log.info(`baton: lock ${JSON.stringify(this.name)}: resume attempt ${c.number} to ${c.addr} answered late; the claim is there now`, { lock: this.name, addr: c.addr, event: "moved" });
        }
        this.arm();
    }
    /** A frame on the claim's connection (section 7's reader, with the credentials of section 14). */
    claimFrame(c, f, at) {
        if (this.state === "held") {
            const late = this.overdue(at);
            if (late)
                return this.end(late); // too late to confirm anything: the lock may have moved
        }
        else if (at >= this.deadline) {
            // A waiter past its deadline believes nothing its connection says now.
            if (!this.resumable)
                return this.end(this.unconfirmed());
            return this.waiterMoves();
        }
        if (f.type === wire.T_ACQUIRED && f.push) {
            if (this.state === "held")
                return this.end(new conn_js_1.Violation("promotion push while holding the lock"));
            // The ticket's credential does not cover the token: the push's does, or none.
            this.ticket = 0n;
            this.#credential = f.credential;
            this.generation = f.generation;
            this.grant(f.token, at);
            return;
        }
        if (!this.pending)
            return this.end(new conn_js_1.Violation("reply with no request outstanding"));
        const first = !this.replied;
        this.pending = false;
        this.replied = true;
        this.missAt = this.silenceAt = undefined;
        this.sched.observe(at - this.sentAt);
        this.deadline = this.sentAt + this.sched.timeout;
        this.nextBeat = at + this.sched.interval();
        const m = this.#move;
        if (m?.silence) {
            // The claim's connection confirmed the claim again: no more attempts;
            // those open stay open, and one answered later is adopted.
            this.stopMove();
            this.opts.log.info(`baton: lock ${JSON.stringify(this.name)}: ${c.addr} answered again; the claim stays there`, { lock: this.name, addr: c.addr, event: "move-ended" });
        }
        if (f.type === wire.T_WAITING) {
            if (this.state === "held")
                return this.end(new conn_js_1.Violation(`WAITING (position ${f.position}) after the lock was granted`));
            if (first) {
                this.ticket = f.ticket;
            }
            else if (f.credential && f.ticket !== this.ticket) {
                return this.end(new conn_js_1.Violation(`WAITING with ticket ${f.ticket} while waiting with ticket ${this.ticket}`));
            }
            if (f.credential) {
                this.#credential = f.credential;
                this.generation = f.generation;
            }
            this.position = f.position;
            this.reportPosition(f.position);
        }
        else if (this.state !== "held") {
            this.ticket = 0n;
            this.#credential = f.credential;
            this.generation = f.generation;
            this.grant(f.token, at);
        }
        else if (f.token !== this.token) {
            return this.end(new conn_js_1.Violation(`ACQUIRED with token ${f.token} while holding token ${this.token}`));
        }
        else if (f.credential) {
            this.#credential = f.credential; // the first reply of a new generation
            this.generation = f.generation;
        }
    }
    reportPosition(position) {
        try {
            this.opts.onWaiting?.(position);
        }
        catch (e) {
            this.opts.log.warn(`baton: the onWaiting callback of lock ${JSON.stringify(this.name)} failed: ${e.message}`, { lock: this.name });
        }
    }
    grant(token, at) {
        if (this.state !== "waiting")
            return;
        this.state = "held";
        this.token = token;
        if (this.opts.unref)
            for (const c of this.#all())
                c.unref();
        if (this.opts.maxHoldMs !== undefined)
            this.holdUntil = at + this.opts.maxHoldMs;
        this.notify();
    }
}
exports.Session = Session;
/** A frame, for a message (never a credential's bytes). */
function describe(f) {
    if (f.type === wire.T_ACQUIRED)
        return `ACQUIRED (token ${f.token}${f.push ? ", push" : ""}${f.credential ? ", with a credential" : ", no credential"})`;
    if (f.type === wire.T_WAITING)
        return `WAITING (position ${f.position}${f.credential ? `, ticket ${f.ticket}` : ", no ticket"})`;
    return `a frame of type 0x${f.type.toString(16)}`;
}
