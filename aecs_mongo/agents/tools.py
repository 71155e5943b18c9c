"""What ``MailTools`` and ``AsyncMailTools`` share: the tool set's state, its refusals, its errors.

A tool set is made from one store and reads only its mailbox (an agent cannot name another:
no tool takes a mailbox). Make that store with ``shared_view=True`` when what the agent reads
may be shown to someone other than the mailbox owner: bcc recipients then appear nowhere.
Tools are read-only unless the set is made with ``writable=True``; the write tools
(``store_message``, ``delete_message``, ``tag_messages``) are listed apart and refused otherwise.

The tools are written once, as ``AsyncMailTools`` over an ``AsyncMessageStore``
(``asynchronous/tools.py``); ``MailTools`` is its generated sync twin (``synchronous/tools.py``,
by ``scripts/unasync.py``). ``call(name, arguments)`` checks the arguments against the tool's
typed signature (``arguments``), runs it and returns a JSON-ready dict within the tool's byte
cap; the methods named after the tools are the same calls. Every refusal (a bad argument, a
write on a read-only set, a message that is not there, an error the store raised for the call)
is a ``ToolError`` whose message is written for the model.

``embed``: a function from text to a vector (for ``semantic_search`` by ``text``; for
``AsyncMailTools`` it may be a coroutine function). Without it, ``semantic_search`` takes a
vector only.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from ..errors import AecsMongoError, DatabaseError, InvalidCursorError, NotFoundError, ToolError
from ..synchronous.driver_errors import translated
from .specs import ToolSpec

__all__ = ["AsyncEmbedder", "Embedder", "ToolSet", "checked_vector", "described", "grouped", "store_errors"]

log = logging.getLogger("aecs_mongo.agents")

Embedder = Callable[[str], Sequence[float]]
AsyncEmbedder = Callable[[str], Sequence[float] | Awaitable[Sequence[float]]]


@contextlib.contextmanager
def store_errors(name: str, said: set[str]) -> Iterator[None]:
    """An error the store raised for a call, as the ``ToolError`` a model reads."""
    try:
        yield
    except ToolError:
        raise
    except InvalidCursorError:
        raise ToolError("that cursor is not one this listing gave: start again without a cursor") from None
    except NotFoundError:
        raise ToolError("no message with that messageId in this mailbox") from None
    except DatabaseError as exc:
        raise _database_failed(name, exc.__cause__ or exc, said) from None
    except (AecsMongoError, TypeError, ValueError) as exc:
        raise ToolError(f"{name}: {exc}") from None
    except Exception as exc:
        if translated(exc) is exc:
            raise
        raise _database_failed(name, exc, said) from None


def _database_failed(name: str, exc: BaseException, said: set[str]) -> ToolError:
    """A server failure, as a model reads it; the operator is told once per kind."""
    kind = type(exc).__name__
    if kind not in said:  # what an operator acts on, said once per kind
        said.add(kind)
        log.warning("agent tool %s: the database failed (%s): %s", name, kind, exc)
    return ToolError(f"the database did not answer ({kind}); try again later")


def checked_vector(value: object) -> list[float]:
    """What an embedding function returned, as a list of finite floats."""
    try:
        vector = [float(x) for x in value]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ToolError("the embedding function did not return a vector of numbers") from None
    if not vector or not all(math.isfinite(x) for x in vector):
        raise ToolError("the embedding function returned an empty vector or one that is not finite")
    return vector


def grouped(table: Mapping[str, ToolSpec]) -> tuple[tuple[ToolSpec, ...], ToolSpec, tuple[ToolSpec, ...]]:
    """The read tools, ``semantic_search`` (listed where vectors are stored) and the write tools."""
    read = tuple(s for s in table.values() if not s.write and s.name != "semantic_search")
    return read, table["semantic_search"], tuple(s for s in table.values() if s.write)


def described(spec: ToolSpec) -> dict[str, Any]:
    """A tool's spec as a JSON-ready dict, for any framework."""
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
        "annotations": dict(spec.annotations),
        "write": spec.write,
        "max_bytes": spec.max_bytes,
    }


class ToolSet:
    """What both flavours share: the flags, the specs, which tools a call may name."""

    #: every tool of the flavour, by name, in the order they are listed
    table: ClassVar[Mapping[str, ToolSpec]] = {}

    def __init__(self, store: Any, *, writable: bool, semantic: bool | None) -> None:
        self.writable = bool(writable)
        self._semantic = semantic
        self._said: set[str] = set()
        self._shared = bool(getattr(store, "shared_view", False))
        self._mailbox_id = str(store.mailbox_id)

    @property
    def mailbox_id(self) -> str:
        """The one mailbox these tools read (the store's)."""
        return self._mailbox_id

    def _listed(self, semantic: bool) -> list[ToolSpec]:
        read, semantic_search, write = grouped(self.table)
        return [*read, *([semantic_search] if semantic else []), *(write if self.writable else ())]

    def _allowed(self, name: object) -> ToolSpec:
        """The spec of tool ``name``, if this set offers it to be called."""
        if not isinstance(name, str) or name not in self.table:
            offered = ", ".join(s.name for s in self._listed(bool(self._semantic)))
            raise ToolError(f"there is no tool {name!r}; the tools: {offered}")
        spec = self.table[name]
        if spec.write and not self.writable:
            raise ToolError(
                f"{name} is a write tool and these tools are read-only"
                " (writes need aecs-mongo mcp --allow-writes, or tools made with writable=True)"
            )
        return spec
