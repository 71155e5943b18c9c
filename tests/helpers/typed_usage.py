"""Type-checked by tests/test_typing.py with ``mypy --strict``: the API as a user writes it.

Not a test module (pytest does not collect it); nothing here runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aecs_mongo import (
    Address,
    AsyncMessageStore,
    ContextEntry,
    MessagePage,
    MessageStore,
    MessageSummary,
    NormalizedEmail,
    SearchHit,
    ThreadSummary,
)


def write(store: MessageStore, raw: bytes, with_extensions: Mapping[str, Any]) -> str:
    typed: NormalizedEmail = {
        "messageId": "m1@example.com",
        "threadId": "m1@example.com",
        "metadata": {"from": {"email": "a@example.com", "name": None}, "subject": "hi", "timestamp": 1},
        "content": {"text": "hello", "forAI": None},
        "attachments": [{"filename": "a.txt", "contentType": "text/plain", "size": 3}],
    }
    store.store(typed)
    store.store(raw)
    store.store({"messageId": "m2@example.com", "threadId": "t", "x_custom": {"any": 1}})  # a plain dict
    store.store(with_extensions)
    return store.store_many([typed, raw], batch_size=10)[0].message_id


def read(store: MessageStore) -> list[str]:
    page: MessagePage = store.list_messages(limit=10)
    first: MessageSummary = page.messages[0]
    sender: Address | None = first["from"]
    ts: int = first["ts"]
    context: list[ContextEntry] = store.thread_context(first["threadId"])
    positions = [entry["position"] + ts for entry in context]
    threads: list[ThreadSummary] = store.list_threads().threads
    hits: list[SearchHit] = store.search("budget")
    email = store.get_message(first["messageId"])
    subject = email["metadata"].get("subject") if email and "metadata" in email else None
    return [
        sender["email"] if sender else "",
        str(positions),
        threads[0]["threadId"],
        hits[0]["snippet"],
        subject or "",
    ]


async def read_async(store: AsyncMessageStore) -> int:
    page = await store.list_messages()
    return sum(m["attachmentCount"] for m in page.messages)
