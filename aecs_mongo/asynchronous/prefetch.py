"""Build the next batches while the current one is written: parsing overlaps the server round trips.

Normalizing raw mail is pure Python and takes about as long as writing it; the writes spend that
time waiting on the socket, with the GIL released. ``store_iter`` therefore reads and builds
the batches after batch *k* on one worker thread while it writes batch *k*: ``ahead`` of them
(two by default: the parse of batch *k+2* then runs while batch *k+1*'s blobs are put ahead,
``filestore.py``, and batch *k* is written). The input iterator is only ever advanced by that
one thread, one batch at a time, so at most ``ahead + 1`` batches are in memory.
"""

from __future__ import annotations

from asyncio import wrap_future
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["AsyncPrefetch"]

T = TypeVar("T")


class AsyncPrefetch(Generic[T]):
    """Calls ``produce`` ahead on a worker thread; ``next()`` returns its result (None: done)."""

    def __init__(self, produce: Callable[[], T | None], ahead: int = 2) -> None:
        self._produce = produce
        self._ahead = max(1, ahead)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aecs-build")
        self._futures: deque[Future[T | None]] = deque(self._pool.submit(produce) for _ in range(self._ahead))
        self._done = False

    async def next(self) -> T | None:
        if not self._futures:
            return None
        future = self._futures.popleft()
        result = await wrap_future(future)
        if result is None:  # the input is done: what is queued after it finds it done too
            self.close()
            return None
        if not self._done:
            self._futures.append(self._pool.submit(self._produce))
        return result

    def close(self) -> None:
        """Stop after the item being built (if any); the input is not read further."""
        self._done = True
        while self._futures:
            self._futures.pop().cancel()
        self._pool.shutdown(wait=True)
