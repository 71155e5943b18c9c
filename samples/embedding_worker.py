import zlib

from pymongo import MongoClient

from aecs_mongo import MessageStore
from aecs_mongo.embedded.server import EmbeddedServer
from aecs_mongo.synchronous.workers import embed_new


def embed(texts: list[str]) -> list[list[float]]:
    """A stand-in for your embedding model: hashed word counts, one vector per text."""
    vectors = []
    for text in texts:
        vector = [0.0] * 64
        for word in text.lower().split():
            vector[zlib.crc32(word.strip(".,?!").encode()) % 64] += 1.0
        vectors.append(vector)
    return vectors


MAIL = [
    b"Message-ID: <1@example.com>\r\nFrom: Bob <bob@example.com>\r\nSubject: Lunch\r\n\r\nLunch on Thursday?\r\n",
    b"Message-ID: <2@example.com>\r\nFrom: Ann <ann@example.com>\r\nSubject: Report\r\n\r\nThe report is attached.\r\n",
    b"Message-ID: <3@example.com>\r\nFrom: Shop <shop@example.com>\r\nSubject: Invoice\r\n\r\nYour invoice.\r\n",
]

with EmbeddedServer() as server, MongoClient(server.uri) as client:
    store = MessageStore(client["mail"], mailbox_id="alice")
    store.ensure_indexes()
    store.store_many(MAIL)
    # embeds what this consumer has not embedded yet, then returns; follow=True keeps watching
    count = embed_new(store, "embedder", embed, batch_size=32)
    print(f"embedded {count} messages")
    for hit in store.semantic_search(embed(["lunch on thursday"])[0], limit=1):
        print(f"{hit['score']:.2f} {hit['subject']}")
