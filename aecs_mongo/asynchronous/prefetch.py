"""Build the next batch while the current one is written: parsing overlaps the server round trips.

Normalizing raw mail is pure Python and takes about as long as writing it; the writes spend that
time waiting on the socket, with the GIL released. ``store_iter`` therefore reads and builds
batch *k+1* on one worker thread while it writes batch *k*. The input iterator is only ever
advanced by that one thread, one batch at a time, so at most two batches are in memory.
"""

from __future__ import annotations

from asyncio import wrap_future
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["AsyncPrefetch"]

T = TypeVar("T")


class AsyncPrefetch(Generic[T]):
    """Calls ``produce`` ahead on a worker thread; ``next()`` returns its result (None: done)."""

    def __init__(self, produce: Callable[[], T | None]) -> None:
        self._produce = produce
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aecs-build")
        self._future: Future[T | None] | None = self._pool.submit(produce)

    async def next(self) -> T | None:
        if self._future is None:
            return None
        result = await wrap_future(self._future)
        # start building the next item unless the input is done (``None``)
        self._future = self._pool.submit(self._produce) if result is not None else None
        return result

    def close(self) -> None:
        """Stop after the item being built (if any); the input is not read further."""
        if self._future is not None:
            self._future.cancel()
            self._future = None
        self._pool.shutdown(wait=True)
