"""Parse raw mail in worker processes where the machine has cores to spare.

``store_many``/``store_iter`` (and so ``aecs-mongo ingest``) build the next batch on a thread
while the current one is written (``asynchronous/prefetch.py``); parsing is pure Python, so that
thread shares the interpreter lock with the writes. Where the machine has more than two cores,
the raw messages of each batch are parsed and their documents built in worker processes
instead, one chunk per worker, and the documents come back in input order; the write path is
unchanged.

When: :func:`worker_count` is ``$AECS_PARSE_WORKERS`` when set (``0``: never), else the
usable cores less two (one for the database server, which on the embedded default runs on
this machine, one for the process that writes), so none on a 1- or 2-core machine. Processes
are started with ``fork`` (Linux only: it does not run the program's main module again, as
``spawn`` would in a script without a ``__main__`` guard), on the second batch (an input of
one batch never pays for them), and they ignore Ctrl-C: the caller's process stops them when
it stops (``ParsePool.close``: pending chunks cancelled, the workers joined, none left behind).

What a worker returns is what the same call would have built in the caller's process: the
documents, or the typed error (``AecsMongoError``) of that message, which the caller reports
with the item's index as before.
"""

from __future__ import annotations

import datetime as _dt
import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import AecsMongoError
from ..pure.documents import MAX_DOCUMENT_BYTES, MessageDocuments, build_documents
from .dates import received_timestamp
from .parse import parse_email

__all__ = ["ParsePool", "RawJob", "RawSpec", "build_raw", "fallback_ts", "worker_count"]

#: workers at most, whatever the machine
MAX_WORKERS = 16


def worker_count() -> int:
    """Worker processes for parsing: ``$AECS_PARSE_WORKERS``, else the usable cores less two."""
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
        workers = cores - 2
    if sys.platform != "linux" or multiprocessing.parent_process() is not None:
        return 0  # fork is Linux's; a worker never starts workers of its own
    return min(max(0, workers), MAX_WORKERS)


def fallback_ts(raw: bytes | None, received_at: _dt.datetime | None) -> int | None:
    """The sort time of a message without a usable Date: the newest Received header's date,
    else the source's own date (``received_at``: an mbox From_ line, a file's time, IMAP
    INTERNALDATE); None: ``processedAt`` then (seed 000's fallback, kept last)."""
    if raw is not None:
        found = received_timestamp(raw)
        if found is not None:
            return found
    if received_at is None:
        return None
    if not isinstance(received_at, _dt.datetime):
        raise TypeError(f"received_at must be a datetime, not {type(received_at).__name__}")
    if received_at.tzinfo is None:
        raise ValueError("received_at must be an aware datetime (UTC if unsure)")
    return int(received_at.timestamp())


@dataclass(frozen=True)
class RawSpec:
    """What building a raw message's documents needs of the store (picklable)."""

    mailbox_id: str
    owner_addresses: frozenset[str]
    for_ai_max_chars: int
    max_document_bytes: int = MAX_DOCUMENT_BYTES


def build_raw(
    spec: RawSpec,
    raw: bytes,
    attachments: Sequence[bytes | None] | None,
    uidl: str | None,
    received_at: _dt.datetime | None,
) -> MessageDocuments:
    """The documents of raw bytes: normalized, kept byte-exact (``writing.build``'s raw path)."""
    parsed = parse_email(raw, for_ai_max_chars=spec.for_ai_max_chars)
    undated = parsed.email["metadata"].get("timestamp") is None
    return build_documents(
        parsed.email,
        mailbox_id=spec.mailbox_id,
        owner_addresses=spec.owner_addresses,
        raw_bytes=raw,
        attachment_data=attachments if attachments is not None else parsed.attachment_data,
        list_id=parsed.list_id,
        uidl=uidl,
        raw_from_full=True,
        max_document_bytes=spec.max_document_bytes,
        fallback_ts=fallback_ts(raw, received_at) if undated else None,
    )


#: one message for a worker: its index in the input, its bytes, its source's date
RawJob = tuple[int, bytes, "_dt.datetime | None"]
#: a typed error as it crosses the process boundary (some take keyword-only arguments, which
#: pickling an exception does not keep): its class, args and attributes
_PortableError = tuple[type[AecsMongoError], tuple[Any, ...], dict[str, Any]]


def _build_chunk(spec: RawSpec, jobs: list[RawJob]) -> list[tuple[int, MessageDocuments | None, _PortableError | None]]:
    out: list[tuple[int, MessageDocuments | None, _PortableError | None]] = []
    for index, raw, received_at in jobs:
        try:
            out.append((index, build_raw(spec, raw, None, None, received_at), None))
        except AecsMongoError as exc:
            out.append((index, None, (type(exc), exc.args, dict(vars(exc)))))
    return out


def _restore(error: _PortableError) -> AecsMongoError:
    cls, args, state = error
    exc = AecsMongoError.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def _ignore_interrupts() -> None:
    # Ctrl-C goes to the whole process group: the caller stops and then stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
                    built[index] = _restore(error)
                else:
                    assert docs is not None
                    built[index] = docs
        return built

    def _submit(self, jobs: list[RawJob]) -> list[Future[Any]]:
        assert self._executor is not None
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
        return [self._executor.submit(_build_chunk, self.spec, chunk) for chunk in chunks if chunk]

    def close(self) -> None:
        """Cancel what has not started, wait for the workers to exit (no process left behind)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
