"""The local full-text index: SQLite FTS5 (the standard library's ``sqlite3``), one file per
database, private to its user.

It follows the store the way ``mongot`` follows ``mongod``: the store writes each batch here
after the batch's commit, and catches the index up from the change stream of ``messages``
(``aecs_mongo/asynchronous/indexing.py``) before it answers from it; its position in that
stream is kept here, per mailbox. It is a cache of the ``messages``/``bodies`` documents and
the HTML blobs: ``reindex`` rebuilds it, and removing the file only costs a rebuild.

Layout of the file (``meta`` says which database it follows, and the schema version):

- ``mailboxes(n, mailbox, mode, token, updated)``: one row per mailbox indexed: ``mode`` is
  ``stream`` (caught up to the change-stream ``token``), ``count`` (no change streams: checked
  against the mailbox's message count when the mailbox's change mark, ``pure/change_marks.py``,
  differs from the one in ``token``) or ``reconcile`` (a rebuild under way, from ``token``);
- ``docs_<n>(rowid, key, thread)``: one row per message (key and thread key as 32 bytes);
- ``labels_<n>(label, rowid)``: a message's tags (``t:<tag>``) and folders (``f:<folder>``),
  for ``tag:``/``is:``/``folder:`` terms (created beside older files' tables: mail stored
  before tags existed has none);
- ``fts_<n>``: FTS5 over ``search_query.COLUMNS`` with ``tokenize='unicode61 remove_diacritics
  2'``, rowid as in ``docs_<n>`` (:func:`fts.rowid_for`: newest last).

The file is created 0600 in a directory created 0700 (SQLite gives its ``-wal`` and ``-shm``
files the database file's mode); a file open to others is tightened, once, with a warning.
Connections use WAL (readers never wait for the writer; several processes may share the
file) and wait up to ``busy_timeout`` for another writer. Each call is one short
transaction; the async store calls these directly (they block its loop for the statement's
time: milliseconds for a page, a fraction of one per message written). An ingest hands each batch's
records to the index's own writer thread (``SearchIndex.later``) and goes on with the next
batch while they are written; every other use of the index waits for them first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import SearchIndexError
from ..pure.search_query import COLUMNS
from . import fts
from .fts import Plan, rowid_for

__all__ = ["SCHEMA_VERSION", "IndexState", "MailboxIndex", "Record", "SearchIndex", "fts"]

log = logging.getLogger("aecs_mongo")

SCHEMA_VERSION = "2"
_OPEN_BITS = stat.S_IRWXG | stat.S_IRWXO
_TOKENIZE = "unicode61 remove_diacritics 2"


@dataclass(frozen=True)
class Record:
    """One message as the index keeps it: its key (hex), sort key, thread key (hex) and text
    columns (``search_query.COLUMNS``)."""

    key: str
    ts: int
    thread: str
    columns: Mapping[str, str]
    #: its ``labels_<n>`` rows (``fts.label_rows``)
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class IndexState:
    """Where a mailbox's index stands: ``mode`` (``stream``, ``count``, ``reconcile``) and the
    change-stream resume token (BSON bytes) it is caught up to, or None."""

    mode: str
    token: bytes | None


def _private_dirs(directory: Path) -> None:
    """Create the missing directories of ``directory``, each 0700."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)


def _private_file(path: Path) -> None:
    """Create ``path`` 0600, or make an existing one private (with a warning): it holds mail text."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        return
    except FileExistsError:
        pass
    except OSError as exc:
        raise SearchIndexError(f"cannot create the search index {path}: {exc}") from None
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise SearchIndexError(f"the search index {path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise SearchIndexError(f"the search index {path} belongs to another user (uid {info.st_uid})")
    for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(candidate.lstat().st_mode)
            if mode & _OPEN_BITS:
                candidate.chmod(mode & ~_OPEN_BITS)
                log.warning("the search index file %s was readable by other users: made it private", candidate)


class SearchIndex:
    """One index file (a database's mailboxes). ``open`` creates it privately; ``mailbox(name)``
    gives one mailbox's tables. Thread-safe: one connection, one lock."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._mailboxes: dict[str, MailboxIndex] = {}
        self._labelled: set[int] = set()  # mailboxes whose labels table is known to exist
        #: the database ``bind`` tied this index to (checked once per object)
        self.bound: str | None = None
        # writes handed to ``later``, in order, and the thread that runs them
        self._behind: list[Future[None]] = []
        self._handover = threading.Lock()
        self._writer: ThreadPoolExecutor | None = None
        self._writer_thread: int | None = None
        self._holding = threading.local()  # how deep this thread is in ``_locked``

    def __repr__(self) -> str:
        return f"SearchIndex({str(self.path)!r})"

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self._open()
        assert self._conn is not None
        return self._conn

    def _open(self) -> None:
        _private_dirs(self.path.parent)
        _private_file(self.path)
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # a cache: a lost commit is caught up again
            with self._write(conn):
                conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS mailboxes (n INTEGER PRIMARY KEY, mailbox TEXT UNIQUE NOT NULL,"
                    " mode TEXT, token BLOB, updated REAL)"
                )
                found = dict(conn.execute("SELECT key, value FROM meta").fetchall())
                if found.get("schema") not in (None, SCHEMA_VERSION):
                    # another layout: start again (the index is a cache; catch-up rebuilds it)
                    for (n,) in conn.execute("SELECT n FROM mailboxes").fetchall():
                        self._drop_tables(conn, int(n))
                    conn.execute("DELETE FROM mailboxes")
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        except sqlite3.DatabaseError as exc:
            raise SearchIndexError(
                f"the search index {self.path} cannot be used ({exc}): remove it and the next search rebuilds it"
            ) from None
        self._conn = conn

    @contextlib.contextmanager
    def _write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: it waits for another writer, not fails)."""
        with self._locked():
            conn = conn or self.conn
            if conn.in_transaction:  # inside another write of this object: part of it
                yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._locked():
            yield self.conn

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The connection's lock, taken once the writes handed to ``later`` are done (not by
        their own thread, nor inside the lock: what runs inside began before them)."""
        depth = getattr(self._holding, "depth", 0)
        if depth == 0 and threading.get_ident() != self._writer_thread:
            self.caught_up()
        with self._lock:
            self._holding.depth = depth + 1
            try:
                yield
            finally:
                self._holding.depth = depth

    def later(self, write: Callable[[], object]) -> None:
        """Run ``write`` on the index's own thread, after the writes handed over before it;
        whatever else uses the index waits for them first, so nothing is read or written out of
        order. A failure is raised by the next use (``caught_up``)."""
        with self._handover:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="aecs-index")
            self._behind.append(self._writer.submit(self._run_later, write))

    def _run_later(self, write: Callable[[], object]) -> None:
        self._writer_thread = threading.get_ident()
        write()

    def caught_up(self) -> None:
        """Wait for the writes handed to ``later``; the first of them that failed is raised."""
        with self._handover:
            behind, self._behind = self._behind, []
        failed: BaseException | None = None
        for future in behind:
            problem = future.exception()
            if failed is None:
                failed = problem
        if failed is not None:
            raise failed

    def bind(self, database: str) -> None:
        """Tie the file to one database (by name) the first time; another database is refused."""
        with self._write() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'database'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('database', ?)", (database,))
            elif row[0] != database:
                raise SearchIndexError(
                    f"the search index {self.path} follows database {row[0]!r}, not {database!r}: give this"
                    " database an index file of its own"
                )
        self.bound = database

    def mailbox(self, mailbox_id: str) -> MailboxIndex:
        """The tables of one mailbox (created on first use)."""
        found = self._mailboxes.get(mailbox_id)
        if found is None:
            found = self._mailboxes[mailbox_id] = MailboxIndex(self, mailbox_id)
        return found

    def mailbox_number(self, mailbox_id: str, create: bool) -> int | None:
        with self.read() as conn:
            row = conn.execute("SELECT n FROM mailboxes WHERE mailbox = ?", (mailbox_id,)).fetchone()
        if row is not None or not create:
            if row is not None and int(row[0]) not in self._labelled:
                with self._write() as conn:  # a file written before tags existed: add the table
                    self._create_labels(conn, int(row[0]))
                self._labelled.add(int(row[0]))
            return None if row is None else int(row[0])
        with self._write() as conn:
            row = conn.execute("SELECT n FROM mailboxes WHERE mailbox = ?", (mailbox_id,)).fetchone()
            if row is not None:
                return int(row[0])
            n = int(conn.execute("INSERT INTO mailboxes (mailbox) VALUES (?)", (mailbox_id,)).lastrowid or 0)
            self._create_tables(conn, n)
            self._labelled.add(n)
            return n

    @staticmethod
    def _create_tables(conn: sqlite3.Connection, n: int) -> None:
        conn.execute(
            f"CREATE TABLE docs_{n} (rowid INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE, thread BLOB NOT NULL)"
        )
        conn.execute(f"CREATE INDEX docs_{n}_thread ON docs_{n} (thread)")
        SearchIndex._create_labels(conn, n)
        conn.execute(f"CREATE VIRTUAL TABLE fts_{n} USING fts5({', '.join(COLUMNS)}, tokenize='{_TOKENIZE}')")
        weights = ", ".join(str(fts.RANK_WEIGHTS[c]) for c in COLUMNS)
        conn.execute(f"INSERT INTO fts_{n} (fts_{n}, rank) VALUES ('rank', 'bm25({weights})')")

    @staticmethod
    def _create_labels(conn: sqlite3.Connection, n: int) -> None:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS labels_{n} (label TEXT NOT NULL, rowid INTEGER NOT NULL,"
            " PRIMARY KEY (label, rowid)) WITHOUT ROWID"
        )
        conn.execute(f"CREATE INDEX IF NOT EXISTS labels_{n}_row ON labels_{n} (rowid)")

    @staticmethod
    def _drop_tables(conn: sqlite3.Connection, n: int) -> None:
        conn.execute(f"DROP TABLE IF EXISTS labels_{n}")
        conn.execute(f"DROP TABLE IF EXISTS docs_{n}")
        conn.execute(f"DROP TABLE IF EXISTS fts_{n}")

    def drop_mailbox(self, mailbox_id: str) -> None:
        """Forget a mailbox: its tables and its position (the erase; a rebuild)."""
        with self._write() as conn:
            row = conn.execute("SELECT n FROM mailboxes WHERE mailbox = ?", (mailbox_id,)).fetchone()
            if row is not None:
                self._drop_tables(conn, int(row[0]))
                conn.execute("DELETE FROM mailboxes WHERE n = ?", (int(row[0]),))
                self._labelled.discard(int(row[0]))
        self._mailboxes.pop(mailbox_id, None)

    def file_bytes(self) -> int:
        """The size of the index on disk (the file and its WAL)."""
        self.caught_up()
        total = 0
        for candidate in (self.path, Path(f"{self.path}-wal")):
            with contextlib.suppress(FileNotFoundError):
                total += candidate.stat().st_size
        return total

    def close(self) -> None:
        try:
            self.caught_up()
        finally:
            with self._handover:
                writer, self._writer = self._writer, None
            if writer is not None:
                writer.shutdown(wait=True)
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                self._mailboxes.clear()


def _chunks(items: Sequence[bytes], size: int = 500) -> Iterator[Sequence[bytes]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class MailboxIndex:
    """One mailbox's rows of a :class:`SearchIndex`."""

    def __init__(self, index: SearchIndex, mailbox_id: str) -> None:
        self.index = index
        self.mailbox_id = mailbox_id
        self._n: int | None = None

    @property
    def n(self) -> int:
        if self._n is None:
            self._n = self.index.mailbox_number(self.mailbox_id, create=True)
        assert self._n is not None
        return self._n

    @property
    def docs(self) -> str:
        return f"docs_{self.n}"

    @property
    def fts(self) -> str:
        return f"fts_{self.n}"

    @property
    def labels(self) -> str:
        return f"labels_{self.n}"

    # --- state --------------------------------------------------------------------------------

    def state(self) -> IndexState | None:
        """Where the mailbox's index stands; None when it was never built (or was dropped)."""
        # looked up each time: another process may have dropped (and remade) the mailbox's tables
        self._n = self.index.mailbox_number(self.mailbox_id, create=False)
        if self._n is None:
            return None
        with self.index.read() as conn:
            row = conn.execute("SELECT mode, token FROM mailboxes WHERE n = ?", (self.n,)).fetchone()
        if row is None or row[0] is None:
            return None
        return IndexState(str(row[0]), None if row[1] is None else bytes(row[1]))

    def set_state(self, mode: str, token: bytes | None) -> None:
        with self.index._write() as conn:
            conn.execute(
                "UPDATE mailboxes SET mode = ?, token = ?, updated = ? WHERE n = ?", (mode, token, time.time(), self.n)
            )

    def settle(self, kept: bytes, mark: bytes) -> bool:
        """Where the index is settled at the change mark ``kept`` (``count`` mode), settle it at
        ``mark`` (a write of this store was the only change between them, and it followed it);
        one statement, so that another process's state is never overwritten by a stale one."""
        n = self.index.mailbox_number(self.mailbox_id, create=False)
        if n is None:
            return False
        with self.index._write() as conn:
            done = conn.execute(
                "UPDATE mailboxes SET token = ?, updated = ? WHERE n = ? AND mode = 'count' AND token = ?",
                (mark, time.time(), n, kept),
            )
            return done.rowcount == 1

    # --- writing --------------------------------------------------------------------------------

    def upsert(self, records: Iterable[Record]) -> int:
        """Index ``records`` (a message indexed already is replaced); one transaction."""
        rows = list({r.key: r for r in records}.values())  # a key twice: the last one
        if not rows:
            return 0
        docs, table = self.docs, self.fts
        with self.index._write() as conn:
            keys = [bytes.fromhex(r.key) for r in rows]
            self._delete(conn, keys)
            for record, key in zip(rows, keys, strict=True):
                rowid = rowid_for(record.ts, record.key)
                while True:
                    try:
                        conn.execute(
                            f"INSERT INTO {docs} (rowid, key, thread) VALUES (?, ?, ?)",
                            (rowid, key, bytes.fromhex(record.thread)),
                        )
                        break
                    except sqlite3.IntegrityError:
                        rowid += 1  # another message of the same second and key prefix holds it
                conn.execute(
                    f"INSERT INTO {table} (rowid, {', '.join(COLUMNS)}) VALUES (?{', ?' * len(COLUMNS)})",
                    (rowid, *(record.columns.get(c) or "" for c in COLUMNS)),
                )
                if record.labels:
                    conn.executemany(f"INSERT INTO {self.labels} VALUES (?, ?)", [(x, rowid) for x in record.labels])
        return len(rows)

    def _delete(self, conn: sqlite3.Connection, keys: Sequence[bytes]) -> int:
        removed = 0
        for part in _chunks(keys):
            marks = ", ".join("?" * len(part))
            rowids = [r for (r,) in conn.execute(f"SELECT rowid FROM {self.docs} WHERE key IN ({marks})", list(part))]
            for rowid in rowids:
                conn.execute(f"DELETE FROM {self.fts} WHERE rowid = ?", (rowid,))
                conn.execute(f"DELETE FROM {self.labels} WHERE rowid = ?", (rowid,))
            conn.execute(f"DELETE FROM {self.docs} WHERE key IN ({marks})", list(part))
            removed += len(rowids)
        return removed

    def set_labels(self, labels_by_key: Mapping[str, Sequence[str]]) -> int:
        """Replace the labels of indexed messages (a tag change: their text is unchanged);
        keys not indexed are left out. How many were indexed."""
        changed = 0
        if not labels_by_key:
            return 0
        with self.index._write() as conn:
            for key, labels in labels_by_key.items():
                row = conn.execute(f"SELECT rowid FROM {self.docs} WHERE key = ?", (bytes.fromhex(key),)).fetchone()
                if row is None:
                    continue
                conn.execute(f"DELETE FROM {self.labels} WHERE rowid = ?", (row[0],))
                conn.executemany(f"INSERT INTO {self.labels} VALUES (?, ?)", [(x, row[0]) for x in labels])
                changed += 1
        return changed

    def change_labels(self, keys: Sequence[str], added: Sequence[str], removed: Sequence[str]) -> None:
        """Add and remove label rows on indexed messages (keys not indexed are left out); one
        transaction."""
        with self.index._write() as conn:
            for part in _chunks([bytes.fromhex(k) for k in keys]):
                marks = ", ".join("?" * len(part))
                rowids = [r for (r,) in conn.execute(f"SELECT rowid FROM {self.docs} WHERE key IN ({marks})", part)]
                for label in removed:
                    conn.executemany(
                        f"DELETE FROM {self.labels} WHERE label = ? AND rowid = ?", [(label, r) for r in rowids]
                    )
                for label in added:
                    conn.executemany(f"INSERT OR IGNORE INTO {self.labels} VALUES (?, ?)", [(label, r) for r in rowids])

    def remove(self, keys: Iterable[str]) -> int:
        """Forget the messages of these keys (hex); how many were indexed."""
        wanted = [bytes.fromhex(k) for k in keys]
        if not wanted:
            return 0
        with self.index._write() as conn:
            return self._delete(conn, wanted)

    # --- reading --------------------------------------------------------------------------------

    def present(self, keys: Iterable[str]) -> set[str]:
        """Which of these keys (hex) are indexed."""
        wanted = [bytes.fromhex(k) for k in keys]
        found: set[str] = set()
        with self.index.read() as conn:
            for part in _chunks(wanted):
                marks = ", ".join("?" * len(part))
                rows = conn.execute(f"SELECT key FROM {self.docs} WHERE key IN ({marks})", list(part))
                found.update(bytes(k).hex() for (k,) in rows)
        return found

    def labels_by_key(self) -> dict[str, tuple[str, ...]]:
        """Each indexed message's labels (sorted), by key (hex); messages without any left out."""
        found: dict[str, list[str]] = {}
        with self.index.read() as conn:
            rows = conn.execute(f"SELECT d.key, l.label FROM {self.labels} l JOIN {self.docs} d ON d.rowid = l.rowid")
            for key, label in rows:
                found.setdefault(bytes(key).hex(), []).append(str(label))
        return {k: tuple(sorted(v)) for k, v in found.items()}

    def rowid_of(self, key: str) -> int | None:
        """The row of one message (None: not indexed)."""
        with self.index.read() as conn:
            row = conn.execute(f"SELECT rowid FROM {self.docs} WHERE key = ?", (bytes.fromhex(key),)).fetchone()
        return None if row is None else int(row[0])

    def keys(self) -> set[str]:
        """Every key indexed (hex)."""
        with self.index.read() as conn:
            return {bytes(k).hex() for (k,) in conn.execute(f"SELECT key FROM {self.docs}")}

    def size(self) -> int:
        with self.index.read() as conn:
            return int(conn.execute(f"SELECT count(*) FROM {self.docs}").fetchone()[0])

    def _select(self, plan: Plan, what: str, before: int | None, by_rank: bool = False) -> tuple[str, list[object]]:
        conditions: list[str] = []
        params: list[object] = []
        table = self.docs
        if plan.label is not None and not by_rank:  # the tag's rows drive, newest first
            table = plan.labels
            conditions.append("label = ?")
            params.append(plan.label)
            if plan.match is not None:
                conditions.append(f"rowid IN (SELECT rowid FROM {self.fts} WHERE {self.fts} MATCH ?)")
                params.append(plan.match)
        elif plan.match is not None:
            table = self.fts
            conditions.append(f"{self.fts} MATCH ?")
            params.append(plan.match)
        if plan.label is not None and by_rank:
            conditions.append(f"rowid IN (SELECT rowid FROM {plan.labels} WHERE label = ?)")
            params.append(plan.label)
        for op, bound in ((">=", plan.lo), ("<", plan.hi), ("<", before)):
            if bound is not None:
                conditions.append(f"rowid {op} ?")
                params.append(bound)
        if plan.where:
            conditions.append(plan.where)
            params += list(plan.params)
        where = " WHERE " + " AND ".join(conditions) if conditions else ""
        return f"SELECT {what} FROM {table}{where}", params

    def search(
        self, plan: Plan, limit: int, *, before: int | None = None, ranked: bool = False
    ) -> list[tuple[int, str, float | None]]:
        """``(rowid, key hex, score)`` of the first ``limit`` matches: newest first, rowids below
        ``before`` (the keyset position), or best first by BM25 (``ranked``, where the plan has
        words; ``score`` is then minus FTS5's rank: higher is better; else None)."""
        if plan.empty:
            return []
        by_rank = ranked and plan.ranked
        sql, params = self._select(plan, "rowid, rank" if by_rank else "rowid, NULL", before, by_rank)
        order = " ORDER BY rank" if by_rank else " ORDER BY rowid DESC"
        with self.index.read() as conn:
            found = [(int(r), s) for r, s in conn.execute(f"{sql}{order} LIMIT ?", [*params, limit])]
            if not found:
                return []
            marks = ", ".join("?" * len(found))
            rowids = [r for r, _ in found]
            keys = dict(conn.execute(f"SELECT rowid, key FROM {self.docs} WHERE rowid IN ({marks})", rowids).fetchall())
        return [(r, bytes(keys[r]).hex(), None if s is None else -float(s)) for r, s in found if r in keys]

    def count(self, plan: Plan) -> int:
        if plan.empty:
            return 0
        sql, params = self._select(plan, "count(*)", None)
        with self.index.read() as conn:
            return int(conn.execute(sql, params).fetchone()[0])

    def texts(self, rowids: Sequence[int]) -> dict[int, dict[str, str]]:
        """The text columns of these rows (for snippets)."""
        if not rowids:
            return {}
        marks = ", ".join("?" * len(rowids))
        with self.index.read() as conn:
            columns = ", ".join(COLUMNS)
            rows = conn.execute(f"SELECT rowid, {columns} FROM {self.fts} WHERE rowid IN ({marks})", list(rowids))
            return {int(r[0]): dict(zip(COLUMNS, r[1:], strict=True)) for r in rows}
