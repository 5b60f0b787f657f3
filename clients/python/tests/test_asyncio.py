"""The asyncio client runs on the event loop's own sockets: no thread, and
a thousand waiters in one loop."""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import sys
import threading
import time
import urllib.parse

from support import ServerCase

import baton

WAITERS = 1000


async def http_get_json(addr: str, path: str) -> dict:
    """GET over the loop's own socket: an executor thread here would hide the
    very thing the test counts."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n".encode())
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n", 1)[0]:
        return {}
    return json.loads(body)


class TestNative(ServerCase):
    def test_thousand_waiters_in_one_loop(self) -> None:
        """1,000 waiters in one event loop each get a place in the queue, and
        the lock goes through all of them in order; the process starts no
        thread for it."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4 * WAITERS and hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * WAITERS), hard))
        name = "py/thousand"
        lease = 10.0
        path = "/v1/locks/" + urllib.parse.quote(name, safe="")
        grants = []

        async def waiter(c: baton.Client) -> None:
            async with c.alock(name, timeout=120) as held:
                grants.append((time.monotonic(), held.token))

        async def main() -> dict:
            threads = threading.active_count()
            first_client = baton.Client([self.srv.addr], lease=lease)
            async with first_client.alock(name) as first:
                start = time.monotonic()
                tasks = [asyncio.create_task(waiter(baton.Client([self.srv.addr], lease=lease))) for _ in range(WAITERS)]
                queued = 0
                while time.monotonic() - start < 60:
                    queued = len((await http_get_json(self.srv.ops, path)).get("waiters", []))
                    if queued >= WAITERS:
                        break
                    await asyncio.sleep(0.05)
                queue_time = time.monotonic() - start
                extra_threads = threading.active_count() - threads
                if queued < WAITERS:
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    return {"queued": queued, "queue_time": queue_time, "extra_threads": extra_threads}
                released_at = time.monotonic()
                first_token = first.token
            results = await asyncio.gather(*tasks, return_exceptions=True)
            return {"queued": queued, "queue_time": queue_time, "extra_threads": extra_threads,
                    "released_at": released_at, "first_token": first_token,
                    "errors": [r for r in results if r is not None]}

        r = asyncio.run(main())
        self.assertGreaterEqual(r["queued"], WAITERS,
                                f"only {r['queued']} of {WAITERS} waiters had a place in the queue after {r['queue_time']:.1f}s")
        self.assertEqual(r["errors"], [])
        self.assertEqual(len(grants), WAITERS)
        tokens = [t for _, t in grants]
        self.assertEqual(tokens, sorted(tokens), "grants out of token order")
        self.assertGreater(tokens[0], r["first_token"])
        total = grants[-1][0] - r["released_at"]
        gaps = [b[0] - a[0] for a, b in zip(grants, grants[1:])]
        print(f"\n  {WAITERS} waiters in one event loop: all queued {r['queue_time']:.2f}s after the tasks started; "
              f"the lock went through all of them in {total:.2f}s ({total / WAITERS * 1000:.2f} ms a handover; "
              f"median {statistics.median(gaps) * 1000:.2f} ms, p99 {sorted(gaps)[int(len(gaps) * 0.99)] * 1000:.2f} ms); "
              f"threads started: {r['extra_threads']}", file=sys.stderr)
        self.assertEqual(r["extra_threads"], 0, "the asyncio client started threads")

    def test_cancel_gives_up_the_wait(self) -> None:
        """Cancelling a task that waits gives its place up at once."""
        name = "py/acancel"

        async def main() -> None:
            holder = await self.client().aacquire(name)
            waiter = asyncio.create_task(self.client().aacquire(name))
            path = "/v1/locks/" + urllib.parse.quote(name, safe="")
            for _ in range(500):
                if len((await http_get_json(self.srv.ops, path)).get("waiters", [])) == 1:
                    break
                await asyncio.sleep(0.01)
            waiter.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await waiter
            for _ in range(500):
                if not (await http_get_json(self.srv.ops, path)).get("waiters", []):
                    break
                await asyncio.sleep(0.01)
            else:
                self.fail("the cancelled waiter is still in the queue")
            await holder.release()

        asyncio.run(main())

    def test_loss_cancels_the_block_and_frees_the_name(self) -> None:
        c = self.client(lease=10)
        name = "py/aloss"

        async def main() -> str:
            try:
                async with c.alock(name):
                    await http_post(self.srv.ops, "/v1/locks/" + urllib.parse.quote(name, safe="") + "/release")
                    await asyncio.sleep(30)  # cancelled at once by the loss
                    return "ran on"
            except baton.LockLost as e:
                self.assertIsInstance(e.cause, baton.ForceReleased)
            async with c.alock(name, timeout=5) as again:  # the name is free again for this client
                return f"again {again.token}"

        start = time.monotonic()
        self.assertTrue(asyncio.run(main()).startswith("again"))
        self.assertLess(time.monotonic() - start, 5)


async def http_post(addr: str, path: str) -> None:
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n".encode())
        await reader.read()
    finally:
        writer.close()
