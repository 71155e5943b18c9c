"""The worker process of ``sandbox.py``: it limits its own address space once, then answers
jobs from its stdin until that closes, each under a CPU-time limit counted from what it has
used so far, its text cut to the job's ``max_chars`` and passed through the hidden-character
handling bodies get."""

from __future__ import annotations

import os
import pickle
import resource
import struct
import sys
from typing import Any

_HEADER = struct.Struct(">Q")


def _limit_memory() -> None:
    memory = int(os.environ.get("AECS_EXTRACT_MEMORY") or 0)
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _limit_cpu(seconds: int) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime) + 1
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = used + max(1, seconds)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def answer(job: dict[str, Any]) -> dict[str, Any]:
    """One job's answer: ``text`` (and ``cut``) or ``error``."""
    from ..pure.invisible import strip_hidden
    from .formats import ExtractionError, MissingLibrary, extract

    _limit_cpu(int(job.get("cpu", 30)))
    try:
        text = extract(job["kind"], job["data"], job.get("attachment") or {}, job.get("options") or {})
    except MissingLibrary as exc:
        return {"missing": str(exc)}
    except ExtractionError as exc:
        return {"error": str(exc)}
    except MemoryError:
        return {"error": "extraction stopped: over its memory limit"}
    except RecursionError:
        return {"error": "extraction stopped: the file nests too deep"}
    except Exception as exc:  # a library's own failure on a broken file
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if text is None:
        return {"text": None}
    max_chars = int(job.get("max_chars", 1_000_000))
    cut = len(text) > max_chars
    text = strip_hidden(text[:max_chars])[0].strip()
    return {"text": text or None, "cut": cut}


def main() -> None:
    _limit_memory()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        job = pickle.loads(stdin.read(_HEADER.unpack(header)[0]))
        try:
            reply = answer(job)
        except MemoryError:
            reply = {"error": "extraction stopped: over its memory limit"}
        payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.write(_HEADER.pack(len(payload)) + payload)
        stdout.flush()


if __name__ == "__main__":
    main()
