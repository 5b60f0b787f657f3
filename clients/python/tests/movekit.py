"""What the move tests share: a clock the test can move forward (a suspend
of the machine, as the client's suspend-aware clock sees it), and the two
drivers behind one face, so that each test runs its claims on threads and
on asyncio alike."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable, Coroutine, List, Optional, TypeVar, Union

import support  # noqa: F401  (puts the package under test on the path)

import baton
from baton import clock

T = TypeVar("T")
AnyHeld = Union[baton.Held, baton.AsyncHeld]


class JumpClock:
    """The client's clock plus an offset that jump() moves forward: what a
    suspend of the machine looks like to the claim (its waits, on the
    monotonic clock, do not see it; the drivers read the clock when they
    wake, and poke() wakes them)."""

    def __init__(self) -> None:
        self._base = clock.default()
        self.offset = 0.0

    def __call__(self) -> float:
        return self._base() + self.offset

    def jump(self, seconds: float) -> None:
        self.offset += seconds


class LoopThread:
    """An event loop in a thread of its own, for tests whose own thread
    plays a scripted server with blocking sockets."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, f: Callable[[], T]) -> T:
        async def on_loop() -> T:
            return f()
        return self.run(on_loop())

    def stop(self) -> None:
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            self.run(drain(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


class Threads:
    """The thread driver: the claims of Client.acquire."""

    name = "threads"

    def start(self, client: baton.Client, name: str, **kw: Any) -> "concurrent.futures.Future[AnyHeld]":
        fut: "concurrent.futures.Future[AnyHeld]" = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(client.acquire(name, **kw))
            except BaseException as e:
                fut.set_exception(e)

        threading.Thread(target=run, daemon=True).start()
        return fut

    def acquire(self, client: baton.Client, name: str, **kw: Any) -> AnyHeld:
        return self.start(client, name, **kw).result(60)

    def on(self, f: Callable[[], T]) -> T:
        return f()

    def release(self, h: AnyHeld) -> None:
        h.release()  # type: ignore[union-attr]

    def close(self) -> None:
        pass


class Asyncio:
    """The asyncio driver: the claims of Client.aacquire, on an event loop
    in a thread of its own; every question to a claim is asked on it."""

    name = "asyncio"

    def __init__(self) -> None:
        self.lt = LoopThread()

    def start(self, client: baton.Client, name: str, **kw: Any) -> "concurrent.futures.Future[AnyHeld]":
        return self.lt.start(client.aacquire(name, **kw))  # type: ignore[arg-type]

    def acquire(self, client: baton.Client, name: str, **kw: Any) -> AnyHeld:
        return self.start(client, name, **kw).result(60)

    def on(self, f: Callable[[], T]) -> T:
        return self.lt.call(f)

    def release(self, h: AnyHeld) -> None:
        # A release takes milliseconds: one that waits for a connection the
        # claim never closes fails here, not after a minute.
        self.lt.run(h.release(), 15)  # type: ignore[arg-type]

    def close(self) -> None:
        self.lt.stop()


Driver = Union[Threads, Asyncio]


def check(drv: Driver, h: AnyHeld) -> Optional[BaseException]:
    """held.check() on the claim's driver: the loss it raises, or None."""
    def ask() -> Optional[BaseException]:
        try:
            h.check()
            return None
        except baton.LockLost as e:
            return e
    return drv.on(ask)


def core_of(drv: Driver, h: AnyHeld, attr: str) -> Any:
    return drv.on(lambda: getattr(h._s.core, attr))


class Captured(logging.Handler):
    """Every record of a logger, formatted (for what the log says)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []
        self._mu = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._mu:
            self.lines.append(f"{record.levelname} {record.getMessage()}")

    def text(self) -> str:
        with self._mu:
            return "\n".join(self.lines)


def capture(name: str) -> "tuple[logging.Logger, Captured]":
    log = logging.getLogger(name)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    h = Captured()
    log.handlers = [h]
    return log, h


def until(cond: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.005)
