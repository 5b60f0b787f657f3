"use strict";
/** One connection of a claim (internal): its socket, its frames, how it ended. */
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
exports.Violation = exports.Conn = void 0;
const node_util_1 = require("node:util");
const errors_js_1 = require("./errors.js");
const wire = __importStar(require("./wire.js"));
/**
 * A connection: `sock` carries the protocol, `raw` is the TCP socket under
 * it (sock itself without TLS), which a release resets. Its 'data' handler
 * is its permanent reader; `v3` lets frames carry a credential.
 */
class Conn {
    sock;
    raw;
    idx;
    addr;
    v3;
    clock;
    events;
    role;
    /** An attempt's resume number (0 for the connection of the claim's ACQUIRE). */
    number;
    /** When the attempt's resume (or the ACQUIRE) was sent, on the claim's clock. */
    sentAt = 0;
    /** An attempt's resume: the claim held (id is its token) or waited (its ticket). */
    resume;
    /** Its end was met, or it was closed here: nothing more is read from it. */
    done = false;
    closed;
    buf = Buffer.alloc(0);
    constructor(sock, raw, 
    /** The index of its address in the client's list. */
    idx, addr, number, role, v3, clock, events) {
        this.sock = sock;
        this.raw = raw;
        this.idx = idx;
        this.addr = addr;
        this.v3 = v3;
        this.clock = clock;
        this.events = events;
        this.number = number;
        this.role = role;
        this.closed = new Promise((resolve) => (sock.destroyed ? resolve() : sock.once("close", () => resolve())));
        sock.setNoDelay(true);
        sock.on("data", (d) => this.onData(d));
        sock.on("end", () => {
            if (this.buf.length > 0)
                this.finish({ kind: "cut", error: new errors_js_1.ConnectionBroken(`connection to ${addr} ended inside a frame`) });
            else
                this.finish({ kind: "eof", error: new errors_js_1.ConnectionBroken(`connection to ${addr} closed by the server`) });
        });
        sock.on("error", (e) => {
            if (/CERTIFICATE|ALERT/i.test(String(e.code ?? "") + e.message)) {
                this.finish({ kind: "broken", error: new errors_js_1.UnauthorizedError(`TLS: ${addr} refused this client: ${e.message}`) });
            }
            else {
                this.finish({ kind: "broken", error: new errors_js_1.ConnectionBroken(`connection to ${addr}: ${e.message}`) });
            }
        });
        sock.on("close", () => this.finish({ kind: "broken", error: new errors_js_1.ConnectionBroken(`connection to ${addr} closed`) }));
    }
    /** Writes one frame. A failed write ends nothing here: the reader meets what explains it. */
    write(frame) {
        if (!this.done)
            this.sock.write(frame);
    }
    /**
     * Closes it from this side: with a reset (RST: the TCP socket under TLS,
     * without close_notify) when `reset`, else with a FIN.
     */
    close(reset) {
        this.done = true;
        if (reset && !this.raw.destroyed)
            this.raw.resetAndDestroy();
        this.sock.destroy();
    }
    /** Keeps the process from waiting for it (a held lock with unref). */
    unref() {
        this.sock.unref();
        this.raw.unref();
    }
    [node_util_1.inspect.custom]() {
        return `Conn { ${this.role} ${this.addr} #${this.number} }`;
    }
    finish(how) {
        if (this.done)
            return;
        this.done = true;
        this.events.ended(this, how);
    }
    onData(d) {
        if (this.done)
            return;
        const at = this.clock();
        this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
        const { frames, rest, error } = wire.split(this.buf);
        this.buf = rest;
        for (const [type, payload] of frames) {
            if (this.done)
                return;
            let f;
            try {
                f = wire.decode(type, payload, this.v3);
            }
            catch (e) {
                return this.finish({ kind: "violation", error: new Violation(`server ${this.addr} sent a bad frame: ${e.message}`) });
            }
            if (f.type === wire.T_ERROR)
                return this.finish({ kind: "error", error: (0, errors_js_1.errorForCode)(f.code, f.message) });
            this.events.frame(this, f, at);
        }
        if (error && !this.done)
            this.finish({ kind: "violation", error: new Violation(`server ${this.addr} sent a bad frame: ${error}`) });
    }
}
exports.Conn = Conn;
/** The server sent a frame that no server may send. */
class Violation extends errors_js_1.BatonError {
    name = "Violation";
}
exports.Violation = Violation;
