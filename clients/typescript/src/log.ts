/**
 * Where the client tells what it does: connections and resume attempts
 * (debug), redirects, reconnections and a claim's moves to another server
 * (info), heartbeat replies a quarter lease late, and losses (warn), and a
 * loss to a conflict (SUPERSEDED: error, else warn). `console` fits; so
 * does a pino or winston logger. Each method is optional; a missing one is
 * not called. No message or field carries a claim's credential.
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info?(message: string, fields?: Record<string, unknown>): void;
  warn?(message: string, fields?: Record<string, unknown>): void;
  error?(message: string, fields?: Record<string, unknown>): void;
}

/** A Logger whose every call is safe, even when the user's throws. */
export function safeLogger(log: Logger | undefined): Required<Logger> {
  const call = (f: Logger["warn"]) => (message: string, fields?: Record<string, unknown>) => {
    try {
      f?.call(log, message, fields);
    } catch {
      // a logger that fails must not break the lock
    }
  };
  return { debug: call(log?.debug), info: call(log?.info), warn: call(log?.warn), error: call(log?.error ?? log?.warn) };
}
