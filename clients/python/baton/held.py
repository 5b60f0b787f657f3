"""A lock held by this process (Held, AsyncHeld), and what holds one for
the length of a block: the pieces that the Client, a set of names
(baton.many) and an election (baton.election) share. It imports none of
those three, so the imports run one way: client imports many and
election, and all three import held."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any, Callable, Optional, Protocol, Tuple, Union

from . import wire
from .aio import AioSession
from .core import HELD, LostEvent
from .errors import BadRequest, LockLost
from .session import Session

__all__ = ["Held", "AsyncHeld", "Acquirer", "READER_LIMIT"]

# The limit of a reader's claim (``shared=True`` without a limit): the
# largest the protocol carries, as close to "no limit" as a shared claim
# gets. Every reader of a name must give the same limit, so it is one fixed
# number, the same in every Baton client.
READER_LIMIT = wire.MAX_LIMIT

# A claim's kind: (shared, limit); limit None for an exclusive claim, sent
# as protocol version 1.
Kind = Tuple[bool, Optional[int]]
EXCLUSIVE: Kind = (False, None)
AnySession = Union[Session, AioSession]


def claim_kind(shared: bool, limit: Optional[int]) -> Kind:
    """The kind of a claim from the keyword arguments: ``limit=n`` a slot of
    a semaphore of n (shared); ``shared=True`` alone a reader (limit
    READER_LIMIT); neither an exclusive claim. BadRequest for anything
    else."""
    if not isinstance(shared, bool):
        raise BadRequest(f"shared {shared!r} is not True or False")
    if limit is None:
        return (True, READER_LIMIT) if shared else EXCLUSIVE
    return True, wire.check_limit(limit)


class _HeldBase:
    def __init__(self, session: AnySession, kind: Kind = EXCLUSIVE) -> None:
        # _owns: this object is the one that must release the session (a
        # Leadership or a set that takes the session over clears it here).
        self._owns = True
        self._s = session
        self.name: str = session.name
        self.token: int = session.token
        # Set when the session sees the loss; is_set() also reads the clock.
        self.lost: LostEvent = session.lost
        # A shared claim (a semaphore's slot, a reader), held together with
        # other shared claims; False for an exclusive one, which holds alone.
        self.shared: bool = kind[0]
        # How many claims may hold the name together with this one, this
        # one included: the shared claim's limit, 1 for an exclusive one.
        self.limit: int = kind[1] if kind[1] is not None else 1

    @property
    def cause(self) -> Optional[BaseException]:
        """Why ownership ended (None while held, and after a release)."""
        self._s.expire_if_late()
        return self._s.cause

    @property
    def valid_until(self) -> float:
        """The ``time.monotonic()`` from which the lock must be taken as lost
        even if no reply has said so: the send time of the latest request
        the server confirmed plus 0.8 x lease (or the ``max_hold`` limit if
        that comes first). It moves on with every confirmed heartbeat.

        The deadline is measured on a clock that counts a suspend of the
        machine (CLOCK_BOOTTIME on Linux), which ``time.monotonic()`` does
        not; this is the time left when asked, from ``time.monotonic()``
        then. Ask again for each step: after a suspend, an answer given
        before it is late by the suspend's length (``check()`` is right at
        once)."""
        return self._s.valid_until()

    def check(self) -> None:
        """Raises LockLost (its ``.cause`` says why) once ownership has ended.

        It reads the clock itself: past ``valid_until`` it ends the claim and
        raises, even if the process has just woken from a pause, or the
        machine from a suspend, and no thread of the client has run yet. Call it right before each step
        that touches the guarded resource; ``lost`` and the cancellation of
        an ``alock`` block are set by the client in the background and can
        come late after a pause."""
        self._s.expire_if_late()
        cause = self._s.cause
        if cause is not None:
            raise LockLost(self.name, cause)

    def _loss(self) -> Optional[LockLost]:
        cause = self._s.cause
        return None if cause is None else LockLost(self.name, cause)

    def _disown(self) -> AnySession:
        """Hands the session over to another object, which releases it."""
        self._owns = False
        return self._s

    def __del__(self) -> None:
        # A held lock that nobody can release any more would be kept by its
        # heartbeats for as long as the process lives: warn, and release.
        if not getattr(self, "_owns", False) or self._s.state != HELD:
            return
        warnings.warn(f"lock {self.name!r} was held and never released: releasing it now "
                      "(use 'with', or call release())", ResourceWarning, source=self, stacklevel=2)
        s = self._s
        if isinstance(s, Session):
            s.close()
        else:
            s.abort()


class Held(_HeldBase):
    """A lock held by this process: the claim is its connection.

    ``token`` is the fencing token of this grant; pass it to the guarded
    resource. ``check()`` raises LockLost once ownership has ended (by the
    clock, at once); ``lost`` is a threading.Event set when the client sees
    the loss. ``shared`` and ``limit`` say what kind of claim it is.

    It is a context manager, as redis-py's and kazoo's locks are:
    ``with client.acquire(name) as held:`` releases on the way out (and
    raises LockLost if the lock was lost inside). A Held that is garbage
    collected while still held warns (ResourceWarning) and releases.
    """

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        release_leaving(self.release, exc)

    def release(self) -> None:
        """Closes the session: the release; the next waiter is promoted at
        once. Raises LockLost if ownership had already ended by a loss (so
        the work that ran may not have been protected), like Go's
        ``Release() error``; a release itself is never a loss. Idempotent."""
        self._s.expire_if_late()
        self._s.close()  # type: ignore[union-attr]
        loss = self._loss()
        if loss is not None:
            raise loss


class AsyncHeld(_HeldBase):
    """A lock held in an asyncio program (see Held). ``async with`` releases
    it on the way out: ``async with await client.aacquire(name) as held:``. Unlike
    ``alock``, a loss does not cancel the block: ask ``held.check()``."""

    async def __aenter__(self) -> "AsyncHeld":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.release()
        except LockLost:
            if not isinstance(exc, LockLost):
                raise

    async def release(self) -> None:
        """Closes the session and waits until the socket is closed (see
        Held.release: raises LockLost if ownership had ended by a loss)."""
        self._s.expire_if_late()
        await self._s.close()  # type: ignore[misc]
        loss = self._loss()
        if loss is not None:
            raise loss


def release_leaving(release: Callable[[], None], exc: Optional[BaseException]) -> None:
    """Releases on the way out of a ``with`` block. Raises LockLost if the
    lock was lost inside it, unless the block is already leaving with a
    LockLost of its own (from check()): that one goes on as it is."""
    try:
        release()
    except LockLost:
        if isinstance(exc, LockLost):
            return
        raise


class CancelOnLoss:
    """Cancels the task that runs an ``async with`` block the moment a loss is
    seen, and turns that cancellation into LockLost on the way out, as
    asyncio.timeout does with TimeoutError."""

    def __init__(self) -> None:
        self._task: "Optional[asyncio.Task[Any]]" = None
        self._cancelled = False
        self._exited = False

    def watch(self) -> Callable[[], None]:
        self._task = asyncio.current_task()
        return self._cancel_block

    def _cancel_block(self) -> None:
        task = self._task
        if self._exited or task is None or self._cancelled:
            return
        if asyncio.current_task() is task:
            return  # the block itself saw the loss (check()): it raises LockLost
        self._cancelled = True
        task.cancel()

    def exit(self, exc: Optional[BaseException], loss: Optional[LockLost]) -> None:
        """Raises what leaves the block: the block's own LockLost, a new one,
        or nothing (the block's exception, if any, goes on)."""
        self._exited = True
        if self._cancelled and self._task is not None:
            uncancel: Optional[Callable[[], int]] = getattr(self._task, "uncancel", None)  # Python 3.11 and later
            if uncancel is not None:
                uncancel()
        if loss is None:
            return
        if isinstance(exc, LockLost) and exc.name == loss.name:
            return  # the block's check() raised it: let it go on as it is
        raise loss from (None if isinstance(exc, asyncio.CancelledError) else exc)


class Acquirer(Protocol):
    """What a set of names and a campaign take their claims through: the
    Client's two acquire doors (see Client.acquire)."""

    def acquire(self, name: str, nowait: bool = False, timeout: Optional[float] = None, *,
                max_hold: Optional[float] = None, owner: Optional[str] = None,
                shared: bool = False, limit: Optional[int] = None) -> Held: ...

    async def aacquire(self, name: str, nowait: bool = False, timeout: Optional[float] = None, *,
                       max_hold: Optional[float] = None, owner: Optional[str] = None,
                       shared: bool = False, limit: Optional[int] = None) -> AsyncHeld: ...
