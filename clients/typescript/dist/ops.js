"use strict";
/**
 * The server's ops API, for what the lock protocol cannot ask: who holds a
 * name (an election's leader) and each new holder as it comes (internal).
 * Every node of a cluster answers it, a follower by asking the leader: GET
 * /v1/locks/{name} for the holder, and the event stream GET /v1/events
 * (Server-Sent Events) for its changes.
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
exports.OpsAPI = exports.OpsError = void 0;
const http = __importStar(require("node:http"));
const https = __importStar(require("node:https"));
const errors_js_1 = require("./errors.js");
/** The ops API answered with an error (401: give adminToken; 403...). */
class OpsError extends errors_js_1.BatonError {
    name = "OpsError";
}
exports.OpsError = OpsError;
function leaderOf(lock) {
    const holder = lock?.holder;
    if (!holder || typeof holder.token !== "number")
        return undefined;
    return { value: String(holder.owner ?? ""), token: BigInt(holder.token) };
}
/** The ops API at the given addresses, tried in order. */
class OpsAPI {
    token;
    tlsOptions;
    #bases;
    #next = 0;
    constructor(addrs, token, tlsOptions) {
        this.token = token;
        this.tlsOptions = tlsOptions;
        this.#bases = addrs.map((a) => {
            let u;
            try {
                u = new URL(a.includes("://") ? a : `${tlsOptions ? "https" : "http"}://${a}`);
            }
            catch {
                throw new errors_js_1.BadRequestError(`ops address ${JSON.stringify(a)} is not host:port or an http(s) URL`);
            }
            if (u.protocol !== "http:" && u.protocol !== "https:")
                throw new errors_js_1.BadRequestError(`ops address ${JSON.stringify(a)} is not host:port or an http(s) URL`);
            return u;
        });
    }
    /** GET path from the first node that answers. */
    async #get(path, accept, signal) {
        if (this.#bases.length === 0)
            throw new errors_js_1.BadRequestError("no ops API address: give the Client opsAddrs (the server's -ops-addr)");
        const errors = [];
        for (let k = 0; k < this.#bases.length; k++) {
            const i = (this.#next + k) % this.#bases.length;
            const base = this.#bases[i];
            try {
                const res = await new Promise((resolve, reject) => {
                    const headers = { Accept: accept };
                    if (this.token)
                        headers.Authorization = `Bearer ${this.token}`;
                    const opts = { method: "GET", headers, signal, agent: false };
                    const req = base.protocol === "https:" ? https.request(new URL(path, base), { ...this.tlsOptions, ...opts }) : http.request(new URL(path, base), opts);
                    req.once("response", resolve);
                    req.once("error", reject);
                    req.end();
                });
                this.#next = i;
                return res;
            }
            catch (e) {
                if (signal?.aborted)
                    throw signal.reason;
                errors.push(`${base.host}: ${e.message}`);
            }
        }
        throw new errors_js_1.ConnectionBroken(`no ops API answered: ${errors.join("; ")}`);
    }
    static async #refusal(res) {
        let body = "";
        for await (const chunk of res)
            body += chunk;
        let msg = res.statusMessage ?? "";
        try {
            const e = JSON.parse(body).error;
            if (typeof e === "string")
                msg = e;
        }
        catch {
            // not the API's JSON: the status says it
        }
        return new OpsError(`the ops API answered ${res.statusCode}: ${msg}`);
    }
    async leader(name, signal) {
        const res = await this.#get(`/v1/locks/${encodeURIComponent(name)}`, "application/json", signal);
        if (res.statusCode === 404) {
            res.resume();
            return undefined;
        }
        if (res.statusCode !== 200)
            throw await OpsAPI.#refusal(res);
        let body = "";
        for await (const chunk of res)
            body += chunk;
        return leaderOf(JSON.parse(body));
    }
    /** Each new leader of name, from the event stream, until signal aborts. */
    async *observe(name, signal, pause) {
        let last = await this.leader(name, signal); // a refusal or a wrong address throws here
        if (last)
            yield last;
        let failures = 0;
        const path = `/v1/events?snapshot=1&lock=${encodeURIComponent(name)}`;
        while (!signal?.aborted) {
            try {
                const res = await this.#get(path, "text/event-stream", signal);
                if (res.statusCode !== 200)
                    throw await OpsAPI.#refusal(res);
                for await (const leader of granted(res, name)) {
                    failures = 0;
                    if (!last || leader.value !== last.value || leader.token !== last.token) {
                        last = leader;
                        yield leader;
                    }
                }
            }
            catch (e) {
                if (signal?.aborted)
                    return;
                if (e instanceof OpsError)
                    throw e;
            }
            failures++;
            await new Promise((resolve) => {
                const t = setTimeout(resolve, pause(failures));
                signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
            });
        }
    }
}
exports.OpsAPI = OpsAPI;
/** The holders of name that an event stream tells of: its snapshot's, then each granted event's. */
async function* granted(res, name) {
    let buf = "";
    let type = "";
    let data = "";
    res.setEncoding("utf8");
    for await (const chunk of res) {
        buf += chunk;
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl).replace(/\r$/, "");
            buf = buf.slice(nl + 1);
            if (line !== "") {
                const i = line.indexOf(":");
                const field = i < 0 ? line : line.slice(0, i);
                const value = i < 0 ? "" : line.slice(i + 1).trimStart();
                if (field === "event")
                    type = value;
                else if (field === "data")
                    data = value;
                continue;
            }
            let doc = {};
            try {
                doc = data ? JSON.parse(data) : {};
            }
            catch {
                doc = {};
            }
            if (type === "snapshot" || type === "resync") {
                for (const lock of Array.isArray(doc.locks) ? doc.locks : []) {
                    const l = leaderOf(lock);
                    if (l && lock.name === name)
                        yield l;
                }
            }
            else if (type === "granted" && doc.lock === name) {
                const l = leaderOf({ holder: doc.session });
                if (l)
                    yield l;
            }
            else if (type === "shutdown") {
                res.destroy();
                return;
            }
            type = "";
            data = "";
        }
    }
}
