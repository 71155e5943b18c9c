"""The ``imap`` section (not in the default list: it needs Dovecot): ``imap.sync`` of real mail
from a local Dovecot over IMAPS vs a bare imaplib client fetching the same UIDs and storing
nothing, and vs ``store_many`` of the served bytes from memory; then the peak RSS of syncing 5
messages of 20 MB beside ingesting the same files; and the flag re-sync: a second run with no
change and one after another client changed the flags of a tenth of the folder, against a
Dovecot with CONDSTORE (``CHANGEDSINCE``) and one configured without (a FLAGS listing of every
known UID).
"""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from aecs_mongo import MessageStore
from benchmarks.common import ROOT, Context, Doc, peak_rss_mb, real_mail, table_of, timed


def _bare_imap_fetch(server: Any, context: Any, batch_size: int) -> tuple[int, int]:
    """A bare client that stores nothing: login, EXAMINE, the same listing and the same UID
    batches ``imap.sync`` sends, every body read and dropped. Returns (messages, bytes)."""
    import imaplib

    from aecs_mongo.pure.imap_records import plan_batches, uid_ranges

    conn = imaplib.IMAP4_SSL("127.0.0.1", server.imaps_port, ssl_context=context, timeout=60)
    conn.login(server.user, server.password)
    conn.select("INBOX", readonly=True)
    _, data = conn.uid("FETCH", "1:*", "(UID RFC822.SIZE)")
    sizes = []
    for line in data:
        if isinstance(line, bytes):
            fields = line.replace(b"(", b" ").replace(b")", b" ").split()
            sizes.append((int(fields[fields.index(b"UID") + 1]), int(fields[fields.index(b"RFC822.SIZE") + 1])))
    count = total = 0
    for batch in plan_batches(sizes, batch_size, 32 * 1024 * 1024):
        _, data = conn.uid("FETCH", uid_ranges(batch), "(UID BODY.PEEK[])")
        for item in data:
            if isinstance(item, tuple):
                count += 1
                total += len(item[1])
    conn.logout()
    return count, total


def bench_imap(client: MongoClient[Doc], sizes: list[int], rounds: int, transactions: bool) -> list[Doc]:
    """``imap.sync`` of real mail from a local Dovecot (IMAPS, its own process) into a fresh
    mailbox, vs (1) a bare imaplib client fetching the same UIDs in the same batches and storing
    nothing, (2) ``store_many`` of the very bytes the server serves, from memory (the store's
    floor). Medians of ``rounds``; ratios = other / ours (1.0: ours costs nothing more)."""
    import ssl

    sys.path.insert(0, str(ROOT))
    from aecs_mongo.mail import imap
    from tests.helpers.dovecot import DovecotServer, dovecot_binary

    binary = dovecot_binary()
    if binary is None or not Path("/usr/lib/dovecot/imap").exists():
        print("imap: skipped (needs dovecot-core and dovecot-imapd)")
        return []
    rows = []
    for size in sizes:
        server = DovecotServer(binary, imap=True)
        try:
            server.start()
            for raw in real_mail(size, offset=size):
                server.deliver_to("INBOX", raw)
            context = ssl.create_default_context(cafile=str(server.cert_path))
            count, total = _bare_imap_fetch(server, context, 100)  # warm: Dovecot indexes the maildir
            served = _served(server, context)
            bare = statistics.median(
                timed(functools.partial(_bare_imap_fetch, server, context, 100)) for _ in range(rounds)
            )
            ours_t, floor_t = [], []
            report = None
            for r in range(rounds):
                db = client[f"bench_imap_{size}_{r}"]
                client.drop_database(db.name)
                store = MessageStore(db, mailbox_id="bench", transactions=transactions)
                store.ensure_indexes()
                start = time.perf_counter()
                report = imap.sync(store, "127.0.0.1", server.user, server.password, port=server.imaps_port,
                                   ssl_context=context, batch_size=100)  # fmt: skip
                ours_t.append(time.perf_counter() - start)
                client.drop_database(db.name)
                floor_db = client[f"bench_imap_floor_{size}_{r}"]
                client.drop_database(floor_db.name)
                floor = MessageStore(floor_db, mailbox_id="bench", transactions=transactions)
                floor.ensure_indexes()
                floor_t.append(timed(functools.partial(floor.store_many, served, batch_size=100)))
                client.drop_database(floor_db.name)
            assert report is not None and report.new + report.present == count, report
            ours, floor_s = statistics.median(ours_t), statistics.median(floor_t)
            rows.append(
                {
                    "messages": count,
                    "MB": round(total / 1e6, 1),
                    "transactions": transactions,
                    "bare_fetch_s": bare,
                    "store_many_s": floor_s,
                    "sync_s": ours,
                    "sync_msgs_per_s": round(count / ours),
                    "bare_ratio": bare / ours,
                    "store_ratio": floor_s / ours,
                }
            )
        finally:
            server.cleanup()
    return rows


def bench_imap_flags(client: MongoClient[Doc], size: int, rounds: int) -> list[Doc]:
    """Re-syncs of a synced folder of ``size`` real messages, with CONDSTORE and without: one
    with nothing changed, one after a tenth of the folder was marked read (or unread again) by
    another client; medians of ``rounds``. ``ratio`` = without / with."""
    import imaplib
    import ssl

    sys.path.insert(0, str(ROOT))
    from aecs_mongo.mail import imap
    from tests.helpers.dovecot import NO_CONDSTORE, DovecotServer, dovecot_binary

    binary = dovecot_binary()
    if binary is None or not Path("/usr/lib/dovecot/imap").exists():
        return []
    mail = real_mail(size, offset=size)
    found: dict[str, dict[str, float]] = {}
    for mode, capabilities in (("condstore", None), ("flags listing", NO_CONDSTORE)):
        server = DovecotServer(binary, imap=True, capabilities=capabilities)
        db = client[f"bench_imap_flags_{size}"]
        client.drop_database(db.name)
        try:
            server.start()
            for raw in mail:
                server.deliver_to("INBOX", raw)
            context = ssl.create_default_context(cafile=str(server.cert_path))
            store = MessageStore(db, mailbox_id="bench")
            store.ensure_indexes()

            def sync(store: MessageStore = store, server: Any = server, context: Any = context) -> Any:
                return imap.sync(store, "127.0.0.1", server.user, server.password, port=server.imaps_port,
                                 ssl_context=context)  # fmt: skip

            sync()
            unchanged, changed = [], []
            for r in range(rounds):
                unchanged.append(timed(sync))
                conn = imaplib.IMAP4_SSL("127.0.0.1", server.imaps_port, ssl_context=context, timeout=60)
                conn.login(server.user, server.password)
                conn.select("INBOX")
                conn.uid("STORE", f"1:{size // 10}", "+FLAGS" if r % 2 == 0 else "-FLAGS", "(\\Seen)")
                conn.logout()
                start = time.perf_counter()
                report = sync()
                changed.append(time.perf_counter() - start)
                assert report.folders[0].flags_changed == size // 10, report
            found[mode] = {"unchanged": statistics.median(unchanged), "changed": statistics.median(changed)}
        finally:
            server.cleanup()
            client.drop_database(db.name)
    with_, without = found["condstore"], found["flags listing"]
    return [
        {
            "messages": size,
            "changed": size // 10,
            "resync": what,
            "condstore_s": with_[what],
            "flags_listing_s": without[what],
            "ratio": without[what] / with_[what],
        }
        for what in ("unchanged", "changed")
    ]


def bench_imap_memory(uri: str, count: int, size_mb: int) -> list[Doc]:
    """Peak RSS of ``aecs-mongo imap`` syncing ``count`` messages of ``size_mb`` MB each (a
    random attachment) from a local Dovecot, next to ``aecs-mongo ingest`` of the same files."""
    import base64

    sys.path.insert(0, str(ROOT))
    from tests.helpers.dovecot import DovecotServer, dovecot_binary

    binary = dovecot_binary()
    if binary is None or not Path("/usr/lib/dovecot/imap").exists():
        return []
    server = DovecotServer(binary, imap=True)
    work = Path(tempfile.mkdtemp(prefix="aecs-imap-mem-"))
    try:
        server.start()
        for n in range(count):
            payload = base64.encodebytes(os.urandom(size_mb * 1024 * 1024 * 3 // 4)).replace(b"\n", b"\r\n")
            raw = (
                b"Message-ID: <big-%d@bench.example>\r\nFrom: a@example.com\r\nSubject: big %d\r\n"
                b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n'
                b"Content-Type: text/plain\r\n\r\nattached\r\n--b\r\nContent-Type: application/octet-stream\r\n"
                b"Content-Transfer-Encoding: base64\r\n\r\n" % (n, n) + payload + b"--b--\r\n"
            )
            server.deliver_to("INBOX", raw)
            (work / f"big-{n}.eml").write_bytes(raw)
        env = {**os.environ, "AECS_BENCH_IMAP_PASSWORD": server.password}
        cli = [sys.executable, "-m", "aecs_mongo", "--uri", uri, "--json"]
        imap_rss, imap_code = peak_rss_mb(
            [*cli, "--db", "bench_imap_mem", "imap", "127.0.0.1", "--port", str(server.imaps_port),
             "--user", server.user, "--password-env", "AECS_BENCH_IMAP_PASSWORD", "--ca-file", str(server.cert_path)],
            env,
        )  # fmt: skip
        ingest_rss, ingest_code = peak_rss_mb([*cli, "--db", "bench_ingest_mem", "ingest", str(work)], env)
        client: MongoClient[Doc] = MongoClient(uri)
        for name in ("bench_imap_mem", "bench_ingest_mem"):
            client.drop_database(name)
        client.close()
        total = sum(p.stat().st_size for p in work.iterdir()) / 1e6
        return [
            {"command": "imap", "messages": count, "MB": round(total), "peakRssMB": imap_rss, "exitCode": imap_code},
            {
                "command": "ingest",
                "messages": count,
                "MB": round(total),
                "peakRssMB": ingest_rss,
                "exitCode": ingest_code,
            },
        ]
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def _served(server: Any, context: Any) -> list[bytes]:
    """Every INBOX message as the server serves it (CRLF line ends), in UID order."""
    import imaplib

    conn = imaplib.IMAP4_SSL("127.0.0.1", server.imaps_port, ssl_context=context, timeout=60)
    conn.login(server.user, server.password)
    conn.select("INBOX", readonly=True)
    _, data = conn.uid("FETCH", "1:*", "(BODY.PEEK[])")
    conn.logout()
    return [item[1] for item in data if isinstance(item, tuple)]


NAME = "imap"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--imap-messages",
        default="500,2000",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="folder sizes to sync from a local Dovecot (needs dovecot-imapd)",
    )


def run(ctx: Context) -> Doc:
    rows = bench_imap(ctx.client, ctx.args.imap_messages, ctx.args.ingest_rounds, ctx.transactions)
    table_of(
        "imap: sync of real mail from a local Dovecot (ratios = other / ours; medians)",
        rows,
        [
            "messages",
            "MB",
            "transactions",
            "bare_fetch_s",
            "store_many_s",
            "sync_s",
            "sync_msgs_per_s",
            "bare_ratio",
            "store_ratio",
        ],
    )
    flags = [
        row for size in ctx.args.imap_messages for row in bench_imap_flags(ctx.client, size, ctx.args.ingest_rounds)
    ]
    table_of(
        "imap flags: re-sync with CONDSTORE vs a FLAGS listing (medians; ratio = listing / condstore)",
        flags,
        ["messages", "changed", "resync", "condstore_s", "flags_listing_s", "ratio"],
    )
    memory = bench_imap_memory(ctx.uri, 5, 20)
    table_of(
        "imap memory: peak RSS syncing 5 messages of 20 MB, next to ingest of the same files",
        memory,
        ["command", "messages", "MB", "peakRssMB", "exitCode"],
    )
    return {"imap": rows, "imap_flags": flags, "imap_memory": memory}
