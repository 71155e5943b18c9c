"""The ``hotcollection`` section (not in the default list): what the ``messages`` indexes cost.

``--hot-size`` messages (default 1,500: the real-mail corpus repeated with fresh Message-IDs),
their ``messages`` documents exactly as the store builds them. In one run it prints:

- **indexes**: each index of ``messages`` as ``ensure_indexes()`` makes it, with its bytes per
  message (``collStats`` ``indexSizes`` over the count), and the seed's four (thread, inbox,
  participant, references) beside them;
- **insert**: the server's CPU per inserted document (``/proc/<server pid>/stat``: the machine is
  shared, CPU time says what a statement costs) with today's indexes against the seed's four,
  the same documents by ``insert_many`` of 500, medians of ``--hot-rounds`` (aim: at most 1.5x),
  and with the layouts of the release before (``to:`` keys in ``lookups``, the spec-version
  index) and of the one before it (five per-header indexes);
- **labels**: whether one index could serve tags and folders (one ``labels`` array of
  ``tag:``/``folder:`` keys under ``(mailboxId, labels, ts -1, messageKey -1)``) in place of the
  two: the insert's server CPU per document and a first page (50, newest first) of ``tag:todo``
  and of ``folder:INBOX``, in server CPU, with today's indexes and with the one index (the
  documents given folders and tags as a mailbox has them: every one in ``INBOX``, two in three
  ``$seen``, one in ten ``todo``);
- **tag change**: ``store.tag(ids, add=["x"])`` and its removal by ``--hot-tag-ids`` (500)
  Message-IDs on a store of those messages, in the server's CPU per message, against a raw
  ``update_many`` by ``_id $in`` of the same documents (``$addToSet`` / ``$pull``) under the
  seed's four indexes (aim: at most 1.6x); and beside ``notmuch tag`` of the same messages (a
  Maildir that ``notmuch new`` indexed), in wall time per message, where notmuch is installed
  (``apt-get install notmuch``);
- **first pages**: ``with_participant``'s first page for correspondents in 1%, 6% and 60% of an
  archive of 1,500 messages against its hand-written query, with its statements (the reads
  section's table, ``--participant-size``, ``--participant-shares``): kept sample, a new store's,
  and the very first read of a new process (``first``).

Run it with ``--mode rs`` (the command line's embedded server is a replica set) and with
``--mode standalone``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gen_mbox

from aecs_mongo import MessageStore
from aecs_mongo.pure.indexes import INDEXES
from benchmarks import reads
from benchmarks.common import Context, Doc, corpus_source, storable, table_of

NAME = "hotcollection"
DEFAULT = False

#: the per-header indexes of the earlier layout, which ``aecs_messages_lookups`` replaced
EARLIER_FIVE = (
    ("aecs_messages_from", (("mailboxId", 1), ("from.email", 1), ("ts", -1), ("messageKey", -1))),
    ("aecs_messages_in_reply_to", (("mailboxId", 1), ("inReplyTo", 1), ("ts", 1), ("messageKey", 1))),
    ("aecs_messages_subject", (("mailboxId", 1), ("subjectKey", 1), ("ts", 1), ("messageKey", 1))),
    ("aecs_messages_list_id", (("mailboxId", 1), ("listId", 1), ("ts", 1), ("messageKey", 1))),
    ("aecs_messages_recipients", (("mailboxId", 1), ("recipients", 1), ("ts", 1), ("messageKey", 1))),
)
SEED_FOUR = ("aecs_messages_thread", "aecs_messages_inbox", "aecs_messages_participant", "aecs_messages_references")
_INSERT_BATCH = 500


_PIDS: dict[int, int] = {}


def server_cpu(client: Any) -> float:
    """The CPU seconds the server process has used (a process of this machine; its pid asked
    once, so the reading costs the server nothing)."""
    if id(client) not in _PIDS:
        _PIDS[id(client)] = int(client.admin.command("serverStatus")["pid"])
    with open(f"/proc/{_PIDS[id(client)]}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_of(client: Any, fn: Callable[[], object]) -> float:
    before = server_cpu(client)
    fn()
    return server_cpu(client) - before


#: the index of the release before: the stale-row scan and the reads' sample (the ``_id`` range now)
SPEC_VERSION = ("aecs_messages_spec_version", (("mailboxId", 1), ("specVersion", 1), ("messageKey", 1)))


def _layout(collection: Any, names: tuple[str, ...] | None, layout: str = "today") -> None:
    """``collection`` emptied, with the ``messages`` indexes named (None: all of today's);
    ``previous``: the release before (today's and the spec-version index); ``earlier``: the one
    before it (the five per-header indexes in place of the lookups one, and the spec-version one)."""
    collection.drop()
    for spec in INDEXES:
        if layout == "earlier" and spec.name == "aecs_messages_lookups":
            continue
        if spec.collection == "messages" and (names is None or spec.name in names):
            collection.create_index(list(spec.keys), name=spec.name, **spec.options)
    extra = [*EARLIER_FIVE, SPEC_VERSION] if layout == "earlier" else [SPEC_VERSION] if layout == "previous" else []
    for name, keys in extra:
        collection.create_index(list(keys), name=name)


def _with_recipient_keys(docs: list[Doc]) -> list[Doc]:
    """The documents as the release before wrote them: a ``to:`` key per recipient in ``lookups``."""
    out = []
    for d in docs:
        keys = list(d["lookups"])
        keys[2:2] = [f"to:{r}" for r in d.get("recipients") or ()]
        out.append({**d, "lookups": list(dict.fromkeys(keys))})
    return out


def _insert(collection: Any, docs: list[Doc]) -> None:
    for start in range(0, len(docs), _INSERT_BATCH):
        collection.insert_many([dict(d) for d in docs[start : start + _INSERT_BATCH]], ordered=False)


def _index_bytes(db: Any, name: str, count: int) -> dict[str, float]:
    stats = db.command("collStats", name)
    return {ix: size / count for ix, size in (stats.get("indexSizes") or {}).items()}


def _labelled(docs: list[Doc], merged: bool) -> list[Doc]:
    out = []
    for i, d in enumerate(docs):
        tags = ["$seen"] if i % 3 else []
        if i % 10 == 0:
            tags.append("todo")
        folders = ["INBOX"] if i % 4 else ["INBOX", "Archive"]
        doc = dict(d)
        if merged:
            doc.pop("tags", None)
            doc.pop("folders", None)
            doc["labels"] = [f"tag:{t}" for t in tags] + [f"folder:{f}" for f in folders]
        else:
            doc["tags"], doc["folders"] = tags, folders
        out.append(doc)
    return out


def _labels(ctx: Context, db: Any, docs: list[Doc], rounds: int) -> Doc:
    """Tags and folders under their two indexes, or one ``labels`` index of prefixed keys."""
    two, one = _labelled(docs, False), _labelled(docs, True)
    label_index = (("mailboxId", 1), ("labels", 1), ("ts", -1), ("messageKey", -1))

    def layout(merged: bool) -> Any:
        collection = db["labels" if merged else "two"]
        collection.drop()
        for spec in INDEXES:
            if spec.collection != "messages" or (
                merged and spec.name in ("aecs_messages_tags", "aecs_messages_folders")
            ):
                continue
            collection.create_index(list(spec.keys), name=spec.name)
        if merged:
            collection.create_index(list(label_index), name="aecs_messages_labels")
        return collection

    insert: dict[str, list[float]] = {"two": [], "labels": []}
    for r in range(rounds):
        for merged in (False, True) if r % 2 == 0 else (True, False):
            collection = layout(merged)
            batch = one if merged else two
            insert["labels" if merged else "two"].append(
                _cpu_of(ctx.client, lambda c=collection, b=batch: _insert(c, b)) / len(docs) * 1000
            )
    reads: Doc = {}
    for name, tag_filter, label_filter in (
        ("tag:todo", {"tags": "todo"}, {"labels": "tag:todo"}),
        ("folder:INBOX", {"folders": "INBOX"}, {"labels": "folder:INBOX"}),
    ):
        for merged, flt, hint in (
            (False, tag_filter, "aecs_messages_tags" if name.startswith("tag") else "aecs_messages_folders"),
            (True, label_filter, "aecs_messages_labels"),
        ):
            collection = db["labels" if merged else "two"]

            def page(c: Any = collection, f: Doc = flt, h: str = hint) -> None:
                found = c.find({"mailboxId": "bench", **f}, {"_id": 1, "ts": 1, "messageKey": 1})
                list(found.sort([("ts", -1), ("messageKey", -1)]).limit(50).hint(h))

            page()
            reads[f"{name} {'labels' if merged else 'two'} cpu_ms"] = statistics.median(
                _cpu_of(ctx.client, page) * 1000 for _ in range(max(rounds, 5))
            )
    two_bytes = _index_bytes(db, "two", len(docs))
    one_bytes = _index_bytes(db, "labels", len(docs))
    return {
        "insert_cpu_ms_two": statistics.median(insert["two"]),
        "insert_cpu_ms_labels": statistics.median(insert["labels"]),
        "bytes_tags_folders": two_bytes["aecs_messages_tags"] + two_bytes["aecs_messages_folders"],
        "bytes_labels": one_bytes["aecs_messages_labels"],
        **reads,
    }


def _notmuch_available() -> bool:
    if shutil.which("notmuch"):
        return True
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "notmuch"], capture_output=True, check=False)
    return shutil.which("notmuch") is not None


def _notmuch(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(["notmuch", *argv], env=env, capture_output=True, check=True, text=True).stdout


def measure(ctx: Context, size: int, tag_ids: int, rounds: int) -> Doc:
    raws, built = storable(list(itertools.islice(gen_mbox.messages(64, source=corpus_source()), size)))
    docs = [d.message for d in built]
    n = len(docs)
    db = ctx.client["aecs_bench_hot"]
    ctx.client.drop_database(db.name)
    report: Doc = {"size": n, "tag_ids": tag_ids, "rounds": rounds, "load": os.getloadavg()}

    # the indexes, with their bytes per message
    today, seed = db["today"], db["seed"]
    _layout(today, None)
    _layout(seed, SEED_FOUR)
    _insert(today, docs)
    _insert(seed, docs)
    sizes = _index_bytes(db, "today", n)
    seed_sizes = _index_bytes(db, "seed", n)
    rows = [{"index": ix, "bytes_per_message": round(b)} for ix, b in sizes.items()]
    rows.append({"index": "total (besides _id)", "bytes_per_message": round(sum(sizes.values()) - sizes["_id_"])})
    rows.append(
        {
            "index": "seed's four (besides _id)",
            "bytes_per_message": round(sum(seed_sizes.values()) - seed_sizes["_id_"]),
        }
    )
    report["indexes"] = rows
    report["messages_indexes_besides_id"] = len(sizes) - 1
    table_of(f"hotcollection: messages indexes on {n:,} messages (collStats indexSizes / count)", rows, list(rows[0]))

    # the insert, in the server's CPU per document: today's indexes against the seed's four
    cpu: dict[str, list[float]] = {"today": [], "seed": [], "previous": [], "earlier": []}
    previous_docs = _with_recipient_keys(docs)
    for r in range(rounds):
        for which in list(cpu) if r % 2 == 0 else list(cpu)[::-1]:
            _layout(db[which], SEED_FOUR if which == "seed" else None, which)
            batch = previous_docs if which == "previous" else docs
            cpu[which].append(_cpu_of(ctx.client, lambda c=db[which], b=batch: _insert(c, b)) / n * 1000)
    db["earlier"].drop()
    db["previous"].drop()
    insert = {k: statistics.median(v) for k, v in cpu.items()}
    report["insert_cpu_ms_per_message"] = {
        **insert,
        "ratio": insert["today"] / insert["seed"],
        "previous_ratio": insert["previous"] / insert["seed"],
        "earlier_ratio": insert["earlier"] / insert["seed"],
    }

    report["labels"] = _labels(ctx, db, docs, rounds)

    # the tag change by ids: the store's, against a raw update_many under the seed's four
    store = MessageStore(db, mailbox_id="bench")
    store.ensure_indexes()
    store.store_many(raws)
    ids = [d.message_id for d in built[:tag_ids]]
    by_ids = {"_id": {"$in": [d.message["_id"] for d in built[:tag_ids]]}}
    ours: list[float] = []
    raw_cpu: list[float] = []
    ours_wall: list[float] = []
    changed: set[int] = set()
    for r in range(rounds):
        for op in ("add", "remove"):

            def tag(op: str = op) -> None:
                report_ = store.tag(ids, add=["x"]) if op == "add" else store.tag(ids, remove=["x"])
                changed.add(report_.changed)

            def base(op: str = op) -> None:
                update = {"$addToSet": {"tags": "x"}} if op == "add" else {"$pull": {"tags": "x"}}
                seed.update_many(by_ids, update)

            for which in ("ours", "raw") if r % 2 == 0 else ("raw", "ours"):
                if which == "ours":
                    started = time.perf_counter()
                    ours.append(_cpu_of(ctx.client, tag) / tag_ids * 1000)
                    ours_wall.append((time.perf_counter() - started) / tag_ids * 1000)
                else:
                    raw_cpu.append(_cpu_of(ctx.client, base) / tag_ids * 1000)
    tags = {
        "ours_cpu_ms": statistics.median(ours),
        "raw_update_many_seed_four_cpu_ms": statistics.median(raw_cpu),
        "ours_wall_ms": statistics.median(ours_wall),
        "changed": sorted(changed),
    }
    tags["ratio"] = tags["ours_cpu_ms"] / tags["raw_update_many_seed_four_cpu_ms"]

    if _notmuch_available():
        with tempfile.TemporaryDirectory(prefix="aecs-bench-hot-") as tmp:
            maildir = Path(tmp) / "maildir"
            for folder in (maildir, maildir / "batch"):
                for sub in ("cur", "new", "tmp"):
                    (folder / sub).mkdir(parents=True, exist_ok=True)
            for i, raw in enumerate(raws):
                (maildir / ("batch" if i < tag_ids else "") / "cur" / f"{i:07d}.bench:2,S").write_bytes(raw)
            config = Path(tmp) / "notmuch.config"
            config.write_text(
                f"[database]\npath={maildir}\n[user]\nname=Bench\nprimary_email=owner@example.com\n"
                "[new]\ntags=\n[search]\nexclude_tags=\n[maildir]\nsynchronize_flags=false\n"
            )
            env = {**os.environ, "NOTMUCH_CONFIG": str(config)}
            _notmuch(env, "new", "--quiet")
            theirs_n = int(_notmuch(env, "count", "folder:batch"))
            theirs: list[float] = []
            for _ in range(rounds):
                for flag in ("+x", "-x"):
                    started = time.perf_counter()
                    _notmuch(env, "tag", flag, "--", "folder:batch")
                    theirs.append((time.perf_counter() - started) / theirs_n * 1000)
            tags["notmuch_wall_ms"] = statistics.median(theirs)
            tags["notmuch_messages"] = theirs_n
            tags["ours_over_notmuch"] = tags["ours_wall_ms"] / tags["notmuch_wall_ms"]
    else:
        print("  hotcollection: notmuch is not installed (apt-get install notmuch): no comparison")
    report["tag_change"] = tags
    ctx.client.drop_database(db.name)
    return report


def add_arguments(parser: Any) -> None:
    parser.add_argument("--hot-size", type=int, default=1500, help="messages of the hotcollection section")
    parser.add_argument("--hot-tag-ids", type=int, default=500, help="Message-IDs one tag change names")
    parser.add_argument("--hot-rounds", type=int, default=5, help="rounds of the hotcollection section (median)")


def run(ctx: Context) -> Doc:
    report = measure(ctx, ctx.args.hot_size, ctx.args.hot_tag_ids, ctx.args.hot_rounds)
    insert = report["insert_cpu_ms_per_message"]
    table_of(
        "hotcollection: the server's CPU per inserted message (ms, median): today's indexes / the seed's four"
        " (previous: the release before, with to: keys and the spec-version index; earlier: the five"
        " per-header indexes in place of the lookups one)",
        [
            {
                "today_ms": round(insert["today"], 3),
                "seed_four_ms": round(insert["seed"], 3),
                "ratio": round(insert["ratio"], 2),
                "previous_ms": round(insert["previous"], 3),
                "previous_ratio": round(insert["previous_ratio"], 2),
                "earlier_ms": round(insert["earlier"], 3),
                "earlier_ratio": round(insert["earlier_ratio"], 2),
            }
        ],
        ["today_ms", "seed_four_ms", "ratio", "previous_ms", "previous_ratio", "earlier_ms", "earlier_ratio"],
    )
    labels = report["labels"]
    table_of(
        "hotcollection: tags and folders, two indexes or one labels index (insert: server CPU ms per message;"
        " first page of 50: server CPU ms; index bytes per message)",
        [{k: round(v, 3) for k, v in labels.items()}],
        list(labels),
    )
    tags = report["tag_change"]
    row = {
        "ours_cpu_ms": round(tags["ours_cpu_ms"], 3),
        "raw_seed_four_cpu_ms": round(tags["raw_update_many_seed_four_cpu_ms"], 3),
        "ratio": round(tags["ratio"], 2),
        "ours_wall_ms": round(tags["ours_wall_ms"], 3),
    }
    if "notmuch_wall_ms" in tags:
        row |= {
            "notmuch_wall_ms": round(tags["notmuch_wall_ms"], 3),
            "ours/notmuch": round(tags["ours_over_notmuch"], 2),
        }
    table_of(
        f"hotcollection: a tag change by {report['tag_ids']} ids, per message (server CPU; wall beside notmuch tag), "
        f"load {report['load'][0]:.1f}",
        [row],
        list(row),
    )
    participant = (
        reads.bench_participant(ctx.uri, ctx.args.participant_size, ctx.args.participant_shares, ctx.args.rounds)
        if ctx.args.participant_shares
        else []
    )
    if participant:
        table_of(
            f"hotcollection: with_participant's first page on an archive of {ctx.args.participant_size:,} messages"
            " (newest three years old): median ms, ours / the hand-written query, statements (kept sample;"
            " cold: a new store's; first: a new process's)",
            participant,
            reads.PARTICIPANT_COLUMNS,
        )
    report["participant_archive"] = participant
    return {"hotcollection": report}
