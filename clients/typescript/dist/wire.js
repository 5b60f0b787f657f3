"use strict";
/** The bytes of Baton's wire protocol, versions 1 and 2 (docs/protocol.md). */
Object.defineProperty(exports, "__esModule", { value: true });
exports.HEARTBEAT = exports.FLAG_SHARED = exports.FLAG_NOWAIT = exports.MAX_LIMIT = exports.MAX_LEASE_MS = exports.T_ACQUIRED = exports.T_WAITING = exports.T_ERROR = exports.T_HEARTBEAT = exports.T_ACQUIRE = exports.MAX_PAYLOAD = exports.HEADER_SIZE = exports.VERSION_2 = exports.VERSION = void 0;
exports.checkName = checkName;
exports.checkOwner = checkOwner;
exports.checkLeaseMs = checkLeaseMs;
exports.checkLimit = checkLimit;
exports.encodeAcquire = encodeAcquire;
exports.encodeFrame = encodeFrame;
exports.decode = decode;
exports.split = split;
const errors_js_1 = require("./errors.js");
/** What an exclusive claim sends: every server speaks it. */
exports.VERSION = 1;
/** What a shared claim sends: the SHARED flag and a limit. */
exports.VERSION_2 = 2;
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
exports.HEARTBEAT = Buffer.from([exports.T_HEARTBEAT, 0, 0]);
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
/** Any frame: type, u16 length, payload. */
function encodeFrame(type, payload) {
    const b = Buffer.alloc(exports.HEADER_SIZE + payload.length);
    b[0] = type;
    b.writeUInt16BE(payload.length, 1);
    Buffer.from(payload).copy(b, exports.HEADER_SIZE);
    return b;
}
/** Decodes a server frame's payload, or throws ProtocolError. */
function decode(type, p) {
    const f = { type, position: 0, push: false, token: 0n, code: 0, message: "" };
    if (type === exports.T_WAITING) {
        if (p.length !== 5)
            throw new errors_js_1.ProtocolError(`WAITING payload of ${p.length} bytes, want 5`);
        f.position = p.readUInt32BE(1);
    }
    else if (type === exports.T_ACQUIRED) {
        if (p.length !== 9)
            throw new errors_js_1.ProtocolError(`ACQUIRED payload of ${p.length} bytes, want 9`);
        f.push = (p[0] & 1) !== 0;
        f.token = p.readBigUInt64BE(1);
        if (f.token === 0n)
            throw new errors_js_1.ProtocolError("ACQUIRED with token 0");
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
