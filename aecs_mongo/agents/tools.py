"""``MailTools`` and ``AsyncMailTools``: the agent tools over one store, as plain Python calls.

A tool set is made from one store and reads only its mailbox (an agent cannot name another:
no tool takes a mailbox). Make that store with ``shared_view=True`` when what the agent reads
may be shown to someone other than the mailbox owner: bcc recipients then appear nowhere.
Tools are read-only unless the set is made with ``writable=True``; the write tools
(``store_message``, ``delete_message``, ``tag_messages``) are listed apart and are refused otherwise.

``call(name, arguments)`` checks the arguments against the tool's schema, runs the tool's body
(``bodies``) against the store and returns a JSON-ready dict within the tool's byte cap; every
refusal (a bad argument, a write on a read-only set, a message that is not there, an error the
store raised for the call) is a ``ToolError`` whose message is written for the model. The
methods named after the tools (``search``, ``get_thread``...) are the same calls with keyword
arguments. ``specs()`` lists the tools this set offers (``semantic_search`` only where the
mailbox holds vectors, unless ``semantic`` says otherwise); ``describe()`` gives them as
JSON-ready dicts for any framework.

``embed``: a function from text to a vector (for ``semantic_search`` by ``text``; for
``AsyncMailTools`` it may be a coroutine function). Without it, ``semantic_search`` takes a
vector only.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from typing import Any, TypeVar

from pymongo.errors import PyMongoError

from ..errors import AecsMongoError, InvalidCursorError, NotFoundError, ToolError
from .arguments import check_arguments
from .bodies import BODIES, Call, Embed, Steps, View, vectors_stored
from .shaping import fit
from .specs import READ_TOOLS, SEMANTIC_SEARCH, SPECS, WRITE_TOOLS, ToolSpec

__all__ = ["AsyncMailTools", "MailTools", "arun_steps", "run_steps", "store_errors"]

log = logging.getLogger("aecs_mongo.agents")

T = TypeVar("T")
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
    except (AecsMongoError, TypeError, ValueError) as exc:
        raise ToolError(f"{name}: {exc}") from None
    except PyMongoError as exc:
        kind = type(exc).__name__
        if kind not in said:  # what an operator acts on, said once per kind
            said.add(kind)
            log.warning("agent tool %s: the database failed (%s): %s", name, kind, exc)
        raise ToolError(f"the database did not answer ({kind}); try again later") from None


def _vector(value: object) -> list[float]:
    """What an embedding function returned, as a list of finite floats."""
    try:
        vector = [float(x) for x in value]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ToolError("the embedding function did not return a vector of numbers") from None
    if not vector or not all(math.isfinite(x) for x in vector):
        raise ToolError("the embedding function returned an empty vector or one that is not finite")
    return vector


def _method(store: Any, method: str, name: str) -> Any:
    """The store's ``method``; a store without it (``count`` came with the query language) refuses
    the tool with a ``ToolError`` rather than crash the caller."""
    found = getattr(store, method, None)
    if not callable(found):
        raise ToolError(f"{name} is not available on this store (it has no {method}: upgrade aecs-mongo)")
    return found


def run_steps(store: Any, steps: Generator[Call | Embed, Any, T], embed: Any, name: str, said: set[str]) -> T:
    """Drive a body over a sync store: each ``Call`` a plain call, each ``Embed`` ``embed(text)``."""
    value: Any = None
    try:
        while True:
            step = steps.send(value)
            with store_errors(name, said):
                if isinstance(step, Embed):
                    if embed is None:
                        raise ToolError("no embedding function is configured here: give a vector instead of text")
                    value = _vector(embed(step.text))
                else:
                    value = _method(store, step.method, name)(*step.args, **step.kwargs)
    except StopIteration as stop:
        done: T = stop.value
        return done


async def arun_steps(store: Any, steps: Generator[Call | Embed, Any, T], embed: Any, name: str, said: set[str]) -> T:
    """Drive a body over an async store: each call awaited (an ``embed`` may be async too)."""
    value: Any = None
    try:
        while True:
            step = steps.send(value)
            with store_errors(name, said):
                if isinstance(step, Embed):
                    if embed is None:
                        raise ToolError("no embedding function is configured here: give a vector instead of text")
                    vector = embed(step.text)
                    value = _vector(await vector if inspect.isawaitable(vector) else vector)
                else:
                    value = _method(store, step.method, name)(*step.args, **step.kwargs)
                    value = await value if inspect.isawaitable(value) else value
    except StopIteration as stop:
        done: T = stop.value
        return done


class _ToolSet:
    """What both flavours share: the store, the flags, the specs, checking a call."""

    def __init__(self, store: Any, *, writable: bool, embed: Any, semantic: bool | None) -> None:
        self.store = store
        self.writable = bool(writable)
        self.embed = embed
        self._semantic = semantic
        self._said: set[str] = set()

    @property
    def mailbox_id(self) -> str:
        """The one mailbox these tools read (the store's)."""
        return str(self.store.mailbox_id)

    def _listed(self, semantic: bool) -> list[ToolSpec]:
        listed = list(READ_TOOLS)
        if semantic:
            listed.append(SEMANTIC_SEARCH)
        return listed + (list(WRITE_TOOLS) if self.writable else [])

    def _prepare(self, name: object, arguments: object) -> tuple[ToolSpec, Steps]:
        if not isinstance(name, str) or name not in SPECS:
            offered = ", ".join(s.name for s in self._listed(bool(self._semantic)))
            raise ToolError(f"there is no tool {name!r}; the tools: {offered}")
        spec = SPECS[name]
        if spec.write and not self.writable:
            raise ToolError(
                f"{name} is a write tool and these tools are read-only"
                " (writes need aecs-mongo mcp --allow-writes, or tools made with writable=True)"
            )
        checked = check_arguments(spec, arguments)
        view = View(shared=bool(getattr(self.store, "shared_view", False)))
        return spec, BODIES[name](checked, view)

    @staticmethod
    def _finish(spec: ToolSpec, value: dict[str, Any]) -> dict[str, Any]:
        return fit(value, spec.max_bytes)


class MailTools(_ToolSet):
    """The agent tools over a ``MessageStore`` (or anything with its methods)."""

    def __init__(
        self, store: Any, *, writable: bool = False, embed: Embedder | None = None, semantic: bool | None = None
    ) -> None:
        super().__init__(store, writable=writable, embed=embed, semantic=semantic)

    def _drive(self, name: str, steps: Generator[Call | Embed, Any, T]) -> T:
        return run_steps(self.store, steps, self.embed, name, self._said)

    def call(self, name: str, arguments: object = None) -> dict[str, Any]:
        """Run tool ``name`` with ``arguments`` (a dict, as a model sends them)."""
        spec, steps = self._prepare(name, arguments)
        return self._finish(spec, self._drive(spec.name, steps))

    def specs(self) -> list[ToolSpec]:
        """The tools this set offers: the read tools, ``semantic_search`` where vectors are
        stored (asked of the store once), then the write tools when writable."""
        if self._semantic is None:
            self._semantic = self._drive("stats", vectors_stored())
        return self._listed(self._semantic)

    def describe(self) -> list[dict[str, Any]]:
        """``specs()`` as JSON-ready dicts (name, title, description, input_schema, annotations, write)."""
        return [_described(s) for s in self.specs()]

    # --- the tools by name ---------------------------------------------------------------------

    def search(self, query: str, limit: int = 20) -> dict[str, Any]:
        return self.call("search", {"query": query, "limit": limit})

    def count(self, query: str) -> dict[str, Any]:
        return self.call("count", {"query": query})

    def get_thread(self, thread_id: str, limit: int = 20, max_chars: int | None = None) -> dict[str, Any]:
        return self.call("get_thread", {"thread_id": thread_id, "limit": limit, "max_chars": max_chars})

    def get_message(self, message_id: str, **options: Any) -> dict[str, Any]:
        """Options: ``max_chars``, ``body`` (clean|full), ``include_raw``, ``raw_max_bytes``."""
        return self.call("get_message", {"message_id": message_id, **options})

    def list_messages(self, cursor: str | None = None, limit: int = 20, **filters: Any) -> dict[str, Any]:
        """Filters: ``sender``, ``since``, ``until`` (ISO 8601)."""
        return self.call("list_messages", {"cursor": cursor, "limit": limit, **filters})

    def list_threads(self, cursor: str | None = None, limit: int = 20) -> dict[str, Any]:
        return self.call("list_threads", {"cursor": cursor, "limit": limit})

    def with_participant(self, address: str, cursor: str | None = None, limit: int = 20) -> dict[str, Any]:
        return self.call("with_participant", {"address": address, "cursor": cursor, "limit": limit})

    def replies_to(self, message_id: str, limit: int = 20) -> dict[str, Any]:
        return self.call("replies_to", {"message_id": message_id, "limit": limit})

    def semantic_search(
        self,
        text: str | None = None,
        vector: Sequence[float] | None = None,
        limit: int = 10,
        thread_id: str | None = None,
    ) -> dict[str, Any]:
        args = {"text": text, "vector": None if vector is None else list(vector), "limit": limit}
        return self.call("semantic_search", {**args, "thread_id": thread_id})

    def store_message(self, raw: str) -> dict[str, Any]:
        return self.call("store_message", {"raw": raw})

    def delete_message(self, message_id: str) -> dict[str, Any]:
        return self.call("delete_message", {"message_id": message_id})

    def tag_messages(self, **arguments: Any) -> dict[str, Any]:
        """``query`` or ``message_ids``, ``add``, ``remove``, ``max_messages`` (a write tool)."""
        return self.call("tag_messages", arguments)


class AsyncMailTools(_ToolSet):
    """The agent tools over an ``AsyncMessageStore``: the same tools, awaitable."""

    def __init__(
        self, store: Any, *, writable: bool = False, embed: AsyncEmbedder | None = None, semantic: bool | None = None
    ) -> None:
        super().__init__(store, writable=writable, embed=embed, semantic=semantic)

    async def _drive(self, name: str, steps: Generator[Call | Embed, Any, T]) -> T:
        return await arun_steps(self.store, steps, self.embed, name, self._said)

    async def call(self, name: str, arguments: object = None) -> dict[str, Any]:
        """Run tool ``name`` with ``arguments`` (a dict, as a model sends them)."""
        spec, steps = self._prepare(name, arguments)
        return self._finish(spec, await self._drive(spec.name, steps))

    async def specs(self) -> list[ToolSpec]:
        """The tools this set offers (see ``MailTools.specs``)."""
        if self._semantic is None:
            self._semantic = await self._drive("stats", vectors_stored())
        return self._listed(self._semantic)

    async def describe(self) -> list[dict[str, Any]]:
        return [_described(s) for s in await self.specs()]

    # --- the tools by name ---------------------------------------------------------------------

    async def search(self, query: str, limit: int = 20) -> dict[str, Any]:
        return await self.call("search", {"query": query, "limit": limit})

    async def count(self, query: str) -> dict[str, Any]:
        return await self.call("count", {"query": query})

    async def get_thread(self, thread_id: str, limit: int = 20, max_chars: int | None = None) -> dict[str, Any]:
        return await self.call("get_thread", {"thread_id": thread_id, "limit": limit, "max_chars": max_chars})

    async def get_message(self, message_id: str, **options: Any) -> dict[str, Any]:
        return await self.call("get_message", {"message_id": message_id, **options})

    async def list_messages(self, cursor: str | None = None, limit: int = 20, **filters: Any) -> dict[str, Any]:
        return await self.call("list_messages", {"cursor": cursor, "limit": limit, **filters})

    async def list_threads(self, cursor: str | None = None, limit: int = 20) -> dict[str, Any]:
        return await self.call("list_threads", {"cursor": cursor, "limit": limit})

    async def with_participant(self, address: str, cursor: str | None = None, limit: int = 20) -> dict[str, Any]:
        return await self.call("with_participant", {"address": address, "cursor": cursor, "limit": limit})

    async def replies_to(self, message_id: str, limit: int = 20) -> dict[str, Any]:
        return await self.call("replies_to", {"message_id": message_id, "limit": limit})

    async def semantic_search(
        self,
        text: str | None = None,
        vector: Sequence[float] | None = None,
        limit: int = 10,
        thread_id: str | None = None,
    ) -> dict[str, Any]:
        args = {"text": text, "vector": None if vector is None else list(vector), "limit": limit}
        return await self.call("semantic_search", {**args, "thread_id": thread_id})

    async def store_message(self, raw: str) -> dict[str, Any]:
        return await self.call("store_message", {"raw": raw})

    async def delete_message(self, message_id: str) -> dict[str, Any]:
        return await self.call("delete_message", {"message_id": message_id})

    async def tag_messages(self, **arguments: Any) -> dict[str, Any]:
        """``query`` or ``message_ids``, ``add``, ``remove``, ``max_messages`` (a write tool)."""
        return await self.call("tag_messages", arguments)


def _described(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
        "annotations": dict(spec.annotations),
        "write": spec.write,
        "max_bytes": spec.max_bytes,
    }
