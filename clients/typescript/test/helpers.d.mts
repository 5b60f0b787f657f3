// Types of helpers.mjs, for the tests written in TypeScript.
export interface TestServer {
  addr: string;
  ops: string;
  dataDir: string;
  stop(signal?: string): Promise<void>;
  forceRelease(name: string): Promise<void>;
  waiters(name: string): Promise<number>;
}
export function startServer(opts?: { dataDir?: string; addr?: string; opsAddr?: string; extra?: string[] }): Promise<TestServer>;
export function awaitWaiters(srv: TestServer, name: string, n: number): Promise<void>;
