"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.safeLogger = safeLogger;
/** A Logger whose every call is safe, even when the user's throws. */
function safeLogger(log) {
    const call = (f) => (message, fields) => {
        try {
            f?.call(log, message, fields);
        }
        catch {
            // a logger that fails must not break the lock
        }
    };
    return { debug: call(log?.debug), info: call(log?.info), warn: call(log?.warn), error: call(log?.error ?? log?.warn) };
}
