"""The built-in extractors run in worker processes under limits, so that a hostile attachment
(a PDF that loops, an archive that inflates to gigabytes, a huge image) costs at most one
worker: never the caller's memory, time or process.

A worker is ``python -m aecs_mongo.extraction.child``: it limits its own address space
(``RLIMIT_AS``) once, and before each job its CPU time (``RLIMIT_CPU``, from what it has used so
far); the parent gives each job a wall-clock deadline and kills the worker past it. A worker
that dies or is killed is replaced on the next job; a job's text is cut to ``max_chars`` in the
worker. Requests and answers are pickles behind an 8-byte length, over the worker's stdin and
stdout (pickles only between this process and the child it started).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["Limits", "Outcome", "WorkerPool", "shared_pool"]

_HEADER = struct.Struct(">Q")


@dataclass(frozen=True)
class Limits:
    """What one extraction may use: address space (bytes), CPU seconds, wall-clock seconds, and
    characters of text."""

    memory_bytes: int = 512 * 1024 * 1024
    cpu_seconds: int = 30
    wall_seconds: float = 45.0
    max_chars: int = 1_000_000


@dataclass(frozen=True)
class Outcome:
    """One job's end: its text (None: nothing to read) or the error a person reads."""

    text: str | None = None
    error: str | None = None
    cut: bool = False
    #: a library the extractor needs is not installed (said once, not recorded as an error)
    missing: str | None = None


def _read_exact(fd: int, size: int, deadline: float) -> bytes | None:
    chunks = []
    while size:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class _Worker:
    def __init__(self, limits: Limits) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["AECS_EXTRACT_MEMORY"] = str(limits.memory_bytes)
        env["OMP_THREAD_LIMIT"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "aecs_mongo.extraction.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C reaches the parent, which stops it
        )

    def run(self, job: Mapping[str, Any], limits: Limits) -> Outcome:
        assert self.process.stdin is not None and self.process.stdout is not None
        payload = pickle.dumps(dict(job), protocol=pickle.HIGHEST_PROTOCOL)
        started = time.monotonic()
        try:
            self.process.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.process.stdin.flush()
            deadline = started + limits.wall_seconds
            fd = self.process.stdout.fileno()
            header = _read_exact(fd, _HEADER.size, deadline)
            body = None if header is None else _read_exact(fd, _HEADER.unpack(header)[0], deadline)
        except (BrokenPipeError, EOFError, OSError):
            return Outcome(error=self._ended())
        if body is None:
            self.kill()
            return Outcome(error=f"extraction stopped after {limits.wall_seconds:g} s (the time limit)")
        answer = pickle.loads(body)
        return Outcome(answer.get("text"), answer.get("error"), bool(answer.get("cut")), answer.get("missing"))

    def _ended(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "extraction ended without an answer"
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return "extraction stopped: over its CPU time limit"
        return f"extraction ended abnormally (exit {code}; out of memory?)"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class WorkerPool:
    """Up to ``size`` worker processes, started on first use and reused across jobs; a worker
    that broke a limit is killed and replaced."""

    def __init__(self, size: int = 2, limits: Limits | None = None) -> None:
        self.size = max(1, size)
        self.limits = limits or Limits()
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="aecs-extract")
        self._closed = False

    def _take(self) -> _Worker:
        try:
            worker = self._idle.get_nowait()
        except queue.Empty:
            worker = _Worker(self.limits)
            with self._lock:
                self._all.append(worker)
        return worker

    def _give(self, worker: _Worker) -> None:
        if worker.alive:
            self._idle.put(worker)
        else:
            with self._lock:
                if worker in self._all:
                    self._all.remove(worker)

    def run(self, job: Mapping[str, Any]) -> Outcome:
        """One job (``kind``, ``data``, ``attachment``, ``options``) in a worker."""
        worker = self._take()
        try:
            outcome = worker.run(
                {**job, "max_chars": self.limits.max_chars, "cpu": self.limits.cpu_seconds}, self.limits
            )
        except BaseException:
            worker.kill()
            raise
        finally:
            self._give(worker)
        return outcome

    def run_all(self, jobs: Sequence[Mapping[str, Any]]) -> list[Outcome]:
        """Every job, ``size`` at a time; outcomes in job order."""
        if len(jobs) <= 1:
            return [self.run(job) for job in jobs]
        return list(self._threads.map(self.run, jobs))

    def close(self) -> None:
        """Stop every worker (an idle one ends as its stdin closes; a busy one is killed)."""
        self._closed = True
        self._threads.shutdown(wait=False)
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            worker.kill()


_POOLS: dict[Limits, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(limits: Limits | None = None) -> WorkerPool:
    """The process's pool for ``limits`` (one per set of limits; stopped at exit)."""
    limits = limits or Limits()
    with _POOLS_LOCK:
        pool = _POOLS.get(limits)
        if pool is None:
            pool = _POOLS[limits] = WorkerPool(min(2, os.cpu_count() or 1), limits)
        return pool


@atexit.register
def _close_pools() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()
