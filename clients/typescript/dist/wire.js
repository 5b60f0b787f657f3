"use strict";
/** The bytes of Baton's wire protocol, versions 1 to 3 (docs/protocol.md). */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Credential = exports.HEARTBEAT = exports.MAX_ATTEMPT = exports.CREDENTIAL_SIZE = exports.FLAG_TICKET = exports.FLAG_CREDENTIAL = exports.FLAG_PUSH = exports.FLAG_HELD = exports.FLAG_RESUME = exports.FLAG_SHARED = exports.FLAG_NOWAIT = exports.MAX_LIMIT = exports.MAX_LEASE_MS = exports.T_ACQUIRED = exports.T_WAITING = exports.T_ERROR = exports.T_HEARTBEAT = exports.T_ACQUIRE = exports.MAX_PAYLOAD = exports.HEADER_SIZE = exports.VERSION_3 = exports.VERSION_2 = exports.VERSION = void 0;
exports.checkName = checkName;
exports.checkOwner = checkOwner;
exports.checkLeaseMs = checkLeaseMs;
exports.checkLimit = checkLimit;
exports.encodeAcquire = encodeAcquire;
exports.encodeAcquireV3 = encodeAcquireV3;
exports.encodeFrame = encodeFrame;
exports.decode = decode;
exports.split = split;
const node_util_1 = require("node:util");
const errors_js_1 = require("./errors.js");
/** What an exclusive claim sends without resume: every server speaks it. */
exports.VERSION = 1;
/** What a shared claim sends without resume: the SHARED flag and a limit. */
exports.VERSION_2 = 2;
/** A claim that can move to the next server (section 14): a credential, tickets, resumes. */
exports.VERSION_3 = 3;
exports.HEADER_SIZE = 3;
exports.MAX_PAYLOAD = 1024;
exports.T_ACQUIRE = 0x01;
exports.T_HEARTBEAT = 0x02;
exports.T_ERROR = 0x80;
exports.T_WAITING = 0x81;
exports.T_ACQUIRED = 0x82;
exports.MAX_LEASE_MS = 0xffffffff;
exports.MAX_LIMIT = 0xffff;
exports.FLAG_NOWAIT = 0x01;
exports.FLAG_SHARED = 0x02;
/** ACQUIRE, version 3: the frame continues a claim; the resume block follows the limit. */
exports.FLAG_RESUME = 0x04;
/** ACQUIRE, version 3, with RESUME: the claim holds (resume_id is its token, else its ticket). */
exports.FLAG_HELD = 0x08;
/** ACQUIRED: an unsolicited promotion. */
exports.FLAG_PUSH = 0x01;
/** ACQUIRED, version 3: a generation and a credential follow the token. */
exports.FLAG_CREDENTIAL = 0x02;
/** WAITING, version 3: a ticket, a generation and a credential follow the position. */
exports.FLAG_TICKET = 0x01;
exports.CREDENTIAL_SIZE = 16;
exports.MAX_ATTEMPT = 0xffff;
const MAX_U64 = 0xffffffffffffffffn;
const MAX_U32 = 0xffffffff;
exports.HEARTBEAT = Buffer.from([exports.T_HEARTBEAT, 0, 0]);
function hex2(b) {
    return b.toString(16).padStart(2, "0");
}
function checkText(what, raw, min) {
    if (raw.length < min)
        throw new errors_js_1.BadRequestError(`${what} is empty`);
    if (raw.length > 255)
        throw new errors_js_1.BadRequestError(`${what} is ${raw.length} bytes, more than 255`);
    try {
        new TextDecoder("utf-8", { fatal: true }).decode(raw);
    }
    catch {
        throw new errors_js_1.BadRequestError(`${what} is not valid UTF-8`);
    }
    for (const b of raw) {
        if (b < 0x20 || b === 0x7f)
            throw new errors_js_1.BadRequestError(`${what} holds the control byte 0x${b.toString(16).padStart(2, "0")}`);
    }
}
/** The lock name's bytes, or BadRequestError: 1..255 bytes of UTF-8, no control bytes. */
function checkName(name) {
    const raw = typeof name === "string" ? Buffer.from(name, "utf8") : Buffer.from(name);
    if (typeof name === "string" && raw.toString("utf8") !== name)
        throw new errors_js_1.BadRequestError("lock name is not valid UTF-8");
    checkText("lock name", raw, 1);
    return raw;
}
/** The owner's bytes, or BadRequestError: 0..255 bytes of UTF-8, no control bytes. */
function checkOwner(owner) {
    const raw = typeof owner === "string" ? Buffer.from(owner, "utf8") : Buffer.from(owner);
    if (typeof owner === "string" && raw.toString("utf8") !== owner)
        throw new errors_js_1.BadRequestError("owner is not valid UTF-8");
    checkText("owner", raw, 0);
    return raw;
}
/** A lease in milliseconds, checked: a whole number 1..4294967295. */
function checkLeaseMs(leaseMs) {
    if (!Number.isFinite(leaseMs))
        throw new errors_js_1.BadRequestError(`lease ${leaseMs}ms is not a number`);
    const ms = Math.floor(leaseMs);
    if (ms < 1)
        throw new errors_js_1.BadRequestError(`lease ${leaseMs}ms must be at least 1ms`);
    if (ms > exports.MAX_LEASE_MS)
        throw new errors_js_1.BadRequestError(`lease ${leaseMs}ms exceeds the protocol's maximum of ${exports.MAX_LEASE_MS}ms`);
    return ms;
}
/** A shared claim's limit, checked: a whole number 1..65535. */
function checkLimit(limit) {
    if (typeof limit !== "number" || !Number.isInteger(limit))
        throw new errors_js_1.BadRequestError(`limit ${String(limit)} is not a whole number`);
    if (limit < 1 || limit > exports.MAX_LIMIT)
        throw new errors_js_1.BadRequestError(`limit ${limit} must be from 1 to ${exports.MAX_LIMIT}`);
    return limit;
}
/**
 * An ACQUIRE frame, after the checks the server would make. Without a
 * claim it is version 1 (an exclusive claim); with one, version 2, whose
 * `shared` makes the claim shared (an exclusive claim's limit must be 1).
 */
function encodeAcquire(name, leaseMs, owner = "", nowait = false, claim) {
    const n = checkName(name);
    const o = checkOwner(owner);
    const ms = checkLeaseMs(leaseMs);
    let flags = nowait ? exports.FLAG_NOWAIT : 0;
    if (!claim) {
        const payload = Buffer.alloc(7 + n.length + o.length);
        payload[0] = exports.VERSION;
        payload[1] = flags;
        payload.writeUInt32BE(ms, 2);
        payload[6] = n.length;
        n.copy(payload, 7);
        o.copy(payload, 7 + n.length);
        return encodeFrame(exports.T_ACQUIRE, payload);
    }
    const limit = checkLimit(claim.limit);
    if (claim.shared)
        flags |= exports.FLAG_SHARED;
    else if (limit !== 1)
        throw new errors_js_1.BadRequestError(`limit ${limit} without SHARED: an exclusive claim's limit must be 1`);
    const payload = Buffer.alloc(9 + n.length + o.length);
    payload[0] = exports.VERSION_2;
    payload[1] = flags;
    payload.writeUInt32BE(ms, 2);
    payload.writeUInt16BE(limit, 6);
    payload[8] = n.length;
    n.copy(payload, 9);
    o.copy(payload, 9 + n.length);
    return encodeFrame(exports.T_ACQUIRE, payload);
}
const REDACTED = "credential(redacted)";
/**
 * What lets a connection take a claim over: 16 bytes that the server
 * computed with its key. The bytes live in a private field: the object
 * prints, inspects and serialises as a redacted text, so that no log, error
 * or JSON can carry them; only `bytes()`, for the wire, gives them out.
 */
class Credential {
    #bytes;
    constructor(bytes) {
        if (bytes.length !== exports.CREDENTIAL_SIZE)
            throw new errors_js_1.BadRequestError(`a credential is ${exports.CREDENTIAL_SIZE} bytes, not ${bytes.length}`);
        this.#bytes = Buffer.from(bytes);
    }
    /** A copy of the 16 bytes, to write into a resume. */
    bytes() {
        return Buffer.from(this.#bytes);
    }
    toString() {
        return REDACTED;
    }
    toJSON() {
        return "redacted";
    }
    [node_util_1.inspect.custom]() {
        return REDACTED;
    }
}
exports.Credential = Credential;
/**
 * A version 3 ACQUIRE, after the checks the server would make: a new claim
 * (the layout of version 2 with version 3) or, with `resume`, a resume of
 * the claim it names, whose lease, kind, limit and name must be those of
 * the claim as it was granted.
 */
function encodeAcquireV3(name, leaseMs, owner, nowait, claim, resume) {
    const n = checkName(name);
    const o = checkOwner(owner);
    const ms = checkLeaseMs(leaseMs);
    const limit = checkLimit(claim.limit);
    let flags = nowait ? exports.FLAG_NOWAIT : 0;
    if (claim.shared)
        flags |= exports.FLAG_SHARED;
    else if (limit !== 1)
        throw new errors_js_1.BadRequestError(`limit ${limit} without SHARED: an exclusive claim's limit must be 1`);
    let fixed = 9;
    if (resume) {
        if (nowait)
            throw new errors_js_1.BadRequestError("NOWAIT with RESUME: a resume continues a claim, it never tries for one");
        if (!(typeof resume.id === "bigint" && resume.id > 0n && resume.id <= MAX_U64))
            throw new errors_js_1.BadRequestError(`resume of id ${String(resume.id)}: a token or a ticket is 1 to 2^64 - 1`);
        if (!(Number.isInteger(resume.generation) && resume.generation >= 1 && resume.generation <= MAX_U32)) {
            throw new errors_js_1.BadRequestError(`resume of generation ${resume.generation}: generations are 1 to ${MAX_U32}`);
        }
        if (!(Number.isInteger(resume.attempt) && resume.attempt >= 1 && resume.attempt <= exports.MAX_ATTEMPT)) {
            throw new errors_js_1.BadRequestError(`resume attempt ${resume.attempt}: attempts are 1 to ${exports.MAX_ATTEMPT}`);
        }
        flags |= exports.FLAG_RESUME | (resume.held ? exports.FLAG_HELD : 0);
        fixed = 39;
    }
    const payload = Buffer.alloc(fixed + n.length + o.length);
    payload[0] = exports.VERSION_3;
    payload[1] = flags;
    payload.writeUInt32BE(ms, 2);
    payload.writeUInt16BE(limit, 6);
    if (resume) {
        payload.writeBigUInt64BE(resume.id, 8);
        payload.writeUInt32BE(resume.generation, 16);
        payload.writeUInt16BE(resume.attempt, 20);
        resume.credential.bytes().copy(payload, 22);
    }
    payload[fixed - 1] = n.length;
    n.copy(payload, fixed);
    o.copy(payload, fixed + n.length);
    return encodeFrame(exports.T_ACQUIRE, payload);
}
/** Any frame: type, u16 length, payload. */
function encodeFrame(type, payload) {
    const b = Buffer.alloc(exports.HEADER_SIZE + payload.length);
    b[0] = type;
    b.writeUInt16BE(payload.length, 1);
    Buffer.from(payload).copy(b, exports.HEADER_SIZE);
    return b;
}
/**
 * Decodes a server frame's payload, or throws ProtocolError. In a session
 * of version 3 (`v3`), ACQUIRED and WAITING may carry a credential (29 and
 * 33 bytes, with their flag); in one of version 1 or 2 they never do.
 */
function decode(type, p, v3 = false) {
    const f = { type, position: 0, push: false, token: 0n, code: 0, message: "", ticket: 0n, generation: 0 };
    if (type === exports.T_WAITING) {
        const long = v3 && p.length === 33;
        if (p.length !== 5 && !long)
            throw new errors_js_1.ProtocolError(`WAITING payload of ${p.length} bytes, want ${v3 ? "5 or 33" : "5"}`);
        f.position = p.readUInt32BE(1);
        if (v3 && ((p[0] & exports.FLAG_TICKET) !== 0) !== long)
            throw new errors_js_1.ProtocolError(`WAITING payload of ${p.length} bytes with flags 0x${hex2(p[0])}: TICKET and 33 bytes go together`);
        if (long) {
            f.ticket = p.readBigUInt64BE(5);
            f.generation = p.readUInt32BE(13);
            if (f.ticket === 0n)
                throw new errors_js_1.ProtocolError("WAITING with ticket 0");
            if (f.generation === 0)
                throw new errors_js_1.ProtocolError("WAITING with a credential of generation 0");
            f.credential = new Credential(p.subarray(17, 33));
        }
    }
    else if (type === exports.T_ACQUIRED) {
        const long = v3 && p.length === 29;
        if (p.length !== 9 && !long)
            throw new errors_js_1.ProtocolError(`ACQUIRED payload of ${p.length} bytes, want ${v3 ? "9 or 29" : "9"}`);
        f.push = (p[0] & exports.FLAG_PUSH) !== 0;
        f.token = p.readBigUInt64BE(1);
        if (v3 && ((p[0] & exports.FLAG_CREDENTIAL) !== 0) !== long)
            throw new errors_js_1.ProtocolError(`ACQUIRED payload of ${p.length} bytes with flags 0x${hex2(p[0])}: CREDENTIAL and 29 bytes go together`);
        if (f.token === 0n)
            throw new errors_js_1.ProtocolError("ACQUIRED with token 0");
        if (long) {
            f.generation = p.readUInt32BE(9);
            if (f.generation === 0)
                throw new errors_js_1.ProtocolError("ACQUIRED with a credential of generation 0");
            f.credential = new Credential(p.subarray(13, 29));
        }
    }
    else if (type === exports.T_ERROR) {
        if (p.length < 1 || p.length > 513)
            throw new errors_js_1.ProtocolError(`ERROR payload of ${p.length} bytes, want 1..513`);
        f.code = p[0];
        f.message = p.subarray(1).toString("utf8");
    }
    else {
        throw new errors_js_1.ProtocolError(`unexpected frame type 0x${type.toString(16)}`);
    }
    return f;
}
/**
 * Takes every whole frame off the front of buf. A header with a length over
 * MAX_PAYLOAD is an error at once, its payload unread. Returns the frames,
 * the rest of buf, and the error if any.
 */
function split(buf) {
    const frames = [];
    let off = 0;
    while (buf.length - off >= exports.HEADER_SIZE) {
        const type = buf[off];
        const len = buf.readUInt16BE(off + 1);
        if (len > exports.MAX_PAYLOAD)
            return { frames, rest: buf.subarray(off), error: `frame length ${len} exceeds the limit of ${exports.MAX_PAYLOAD}` };
        const end = off + exports.HEADER_SIZE + len;
        if (buf.length < end)
            break;
        frames.push([type, Buffer.from(buf.subarray(off + exports.HEADER_SIZE, end))]);
        off = end;
    }
    return { frames, rest: buf.subarray(off) };
}
