"""Parse raw mail in worker processes (the documents: ``normalizer/build.py``) where the machine has two cores or more.

``store_many``/``store_iter`` (and so ``aecs-mongo ingest``) build the next batch on a thread
while the current one is written (``asynchronous/prefetch.py``); parsing is pure Python, so that
thread shares the interpreter lock with the writes. Where the machine has more than two cores,
the raw messages of each batch are parsed and their documents built in worker processes
instead, one chunk per worker, and the documents come back in input order; the write path is
unchanged.

When: :func:`worker_count` is ``$AECS_PARSE_WORKERS`` when set (``0``: never), else the
usable cores less two (one for the database server, which on the embedded default runs on
this machine, one for the process that writes), and at least one on a machine of two cores:
there a parse on a thread of the writing process held the interpreter lock while the writes
waited for it after each reply of the server and each synced file (the thread switch comes
every 5 ms), and one worker process ingested a Maildir of real mail faster (measured by
``scripts/bench.py --sections ingest``). None on one core. Processes
are started with ``fork`` (Linux only: it does not run the program's main module again, as
``spawn`` would in a script without a ``__main__`` guard), on the second batch (an input of
one batch never pays for them), and they ignore Ctrl-C: the caller's process stops them when
it stops (``ParsePool.close``: pending chunks cancelled, the workers joined, none left behind).

What a worker returns is what the same call would have built in the caller's process: the
documents, or the typed error (``AecsMongoError``) of that message, which the caller reports
with the item's index as before.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from ..errors import AecsMongoError
from ..pure.documents import MessageDocuments

if TYPE_CHECKING:  # the normalizer is imported on first use (pipeline.py imports this module)
    from ..normalizer.build import RawJob, RawSpec

__all__ = ["MAX_WORKERS", "ParsePool", "worker_count"]

#: workers at most, whatever the machine
MAX_WORKERS = 16


def worker_count() -> int:
    """Worker processes for parsing: ``$AECS_PARSE_WORKERS``, else the usable cores less two, at
    least one where there are two."""
    value = os.environ.get("AECS_PARSE_WORKERS", "").strip()
    if value:
        try:
            wanted = int(value)
        except ValueError:
            raise ValueError(f"AECS_PARSE_WORKERS must be a whole number, not {value!r}") from None
        workers = max(0, wanted)
    else:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        workers = max(cores - 2, 1) if cores >= 2 else 0
    if sys.platform != "linux" or multiprocessing.parent_process() is not None:
        return 0  # fork is Linux's; a worker never starts workers of its own
    return min(max(0, workers), MAX_WORKERS)


def _ignore_interrupts() -> None:
    # Ctrl-C goes to the whole process group: the caller stops and then stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a caller killed outright (SIGKILL) never stops them, and a forked worker holds the write
    # end of its own task pipe, so it would wait on it forever: it exits once its parent is gone
    parent = os.getppid()
    threading.Thread(target=_exit_when_orphaned, args=(parent,), name="aecs-parse-orphan", daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


class ParsePool:
    """Worker processes that build the documents of raw messages, chunk by chunk."""

    def __init__(self, spec: RawSpec, workers: int) -> None:
        self.spec = spec
        self.workers = workers
        self._executor: ProcessPoolExecutor | None = None

    def build(self, jobs: list[RawJob]) -> dict[int, MessageDocuments | AecsMongoError]:
        """The documents (or typed error) of each job, by index. Other exceptions propagate."""
        if not jobs:
            return {}
        from ..normalizer.build import restore_error

        if self._executor is None:
            with warnings.catch_warnings():
                # 3.12+ warns that fork() in a process with threads may deadlock in the child;
                # the child only parses (it takes no lock another thread may hold)
                warnings.simplefilter("ignore", DeprecationWarning)
                self._executor = ProcessPoolExecutor(
                    max_workers=self.workers,
                    mp_context=multiprocessing.get_context("fork"),
                    initializer=_ignore_interrupts,
                )
                futures = self._submit(jobs)  # forks the workers
        else:
            futures = self._submit(jobs)
        built: dict[int, MessageDocuments | AecsMongoError] = {}
        for future in futures:
            for index, docs, error in future.result():
                if error is not None:
                    built[index] = restore_error(error)
                else:
                    assert docs is not None
                    built[index] = docs
        return built

    def _submit(self, jobs: list[RawJob]) -> list[Future[Any]]:
        assert self._executor is not None
        from ..normalizer.build import build_chunk

        # chunks of about equal bytes, one per worker, in input order
        total = sum(len(raw) for _index, raw, _at in jobs)
        share = total / self.workers
        chunks: list[list[RawJob]] = [[]]
        size = 0
        for job in jobs:
            if size >= share and len(chunks) < self.workers:
                chunks.append([])
                size = 0
            chunks[-1].append(job)
            size += len(job[1])
        return [self._executor.submit(build_chunk, self.spec, chunk) for chunk in chunks if chunk]

    def close(self) -> None:
        """Cancel what has not started, wait for the workers to exit (no process left behind)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
