"""Follow Maildir folders, directories and mbox files: each run stores only what changed (``sync_files``).

``aecs-mongo ingest`` runs this for every path but ``-``; a worker calls it the same way::

    report = sync_files(store, ["~/Maildir"])        # a MessageStore
    print(report.summary())   # "10,000 files: 12 new, 3 flag changes, 2 gone (kept)"

The record of what was read lives in the database (``file_sources``, ``pure/file_records.py``),
per mailbox, so any worker that opens the mailbox sees it; it is read and written through
``store.file_records``. A run:

1. Lists the sources: each Maildir directory (``new``, ``cur`` of every folder) whose mtime is
   the one recorded is not listed at all (a Maildir file is never written in place; a delivery,
   rename or deletion changes its directory's mtime); other directories are listed (names and
   inodes, ``scandir``), files of plain directories and mbox files are stat'ed.
2. Reads the records of the listed directories in one query, and compares (``plan``).
3. A Maildir message under another name (its flags changed) or in another directory (``new`` ->
   ``cur``, another folder) becomes a tag and folder change of its message (``store.tag``,
   ``store.set_folders``), without reading the file. A record whose file is gone is removed and
   counted; its message is kept, unless ``remove_missing`` and no copy of it remains in any source
   (no file record, no IMAP record of the mailbox), as ``notmuch new`` does.
4. New and changed files, and the part of each mbox past where the last run stopped, are stored
   through ``store_iter``. An mbox whose first block and the block before the recorded offset
   hash as recorded grew by appending: it is read from that offset. Otherwise it was rewritten and
   is read in full (the messages already stored are found ``present``).
5. A record is written only after ``store_iter`` gave the result of its message (the batch is
   then written and, with ``durable``, journaled); a directory's mtime only once everything in it
   was dealt with. An interrupted run (Ctrl-C, SIGKILL, a full disk) leaves records for what was
   stored only, and the next run reads the rest; at worst a batch is read again and ``present``.

Only a ``MessageStore`` (blocking, as the IMAP sync; an ``AsyncMessageStore`` user runs
``sync_files`` on a thread with a ``MessageStore`` on the same database). Sources are keyed by their absolute path
(``root``): the same folder named through another path is another source.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..pure import file_records as fr
from ..pure import flags
from ..pure.file_records import Listed, RecordWrite
from ..results import StoreResult
from .sources import IngestReport, Origin, RawMessage, Skipped, iter_mbox, not_mail, sniff

if TYPE_CHECKING:
    from ..synchronous.store import MessageStore

__all__ = ["FileSyncReport", "sync_files"]


def _maildir_tags(directory: str, name: str, keywords: Mapping[str, str] | None) -> frozenset[str]:
    """The tags of the Maildir file ``name`` in ``directory`` (``pure/flags.py``)."""
    return frozenset(flags.maildir_tags(name, new=os.path.basename(directory) == "new", keywords=keywords))


def _folder(directory: str) -> str:
    """The folder of a Maildir file's directory under the root (``cur``, ``.Sent/cur``,
    ``work/cur``, ``work/.Sent/cur``): the root Maildir is ``INBOX``, a Maildir++ sub-folder
    ``.a.b`` is ``a/b`` (``pure/flags.py``), a Maildir inside a plain directory is named by its
    path under the root (``work``, and its sub-folders ``work/a/b``)."""
    maildir = os.path.dirname(directory)
    parent, last = os.path.split(maildir)
    if last.startswith("."):
        return flags.maildir_folder(last, parent=parent or flags.INBOX)
    return flags.maildir_folder(None, parent=maildir or flags.INBOX)


@dataclass
class FileSyncReport:
    """What one ``sync_files`` run did: the file counts, and the store's tally (``messages``,
    the ``IngestReport`` that ``ingest`` prints).

    ``files``: message files and mbox files seen; ``new``: read for the first time; ``changed``:
    read again (other size, mtime or inode; an mbox rewritten); ``flag_changes``: Maildir
    messages whose flags changed by a rename; ``moved``: moved to another folder; ``gone``:
    records whose file is gone; ``removed``: messages removed (``remove_missing``, no copy
    left); ``appended``: mbox files read from where the last run stopped; ``unchanged``.
    :meth:`summary` is the line ``10,000 files: 12 new, 3 flag changes, 2 gone (kept)``.
    """

    messages: IngestReport = field(default_factory=IngestReport)
    files: int = 0  # message files and mbox files seen
    new: int = 0  # files read for the first time (an mbox counts once)
    changed: int = 0  # files read again: other size, mtime or inode; an mbox rewritten
    flag_changes: int = 0  # Maildir messages whose flags changed by a rename
    moved: int = 0  # Maildir messages moved to another folder
    gone: int = 0  # records whose file is gone
    removed: int = 0  # messages removed with remove_missing (no copy left)
    appended: int = 0  # mbox files read from where the last run stopped
    unchanged: int = 0

    def summary(self) -> str:
        kept = "kept" if not self.removed else f"{self.removed:,} removed"
        text = f"{self.files:,} file{'' if self.files == 1 else 's'}: {self.new:,} new"
        text += f", {self.flag_changes:,} flag changes"
        text += f", {self.gone:,} gone ({kept})"
        extra = [(self.moved, "moved"), (self.changed, "changed"), (self.appended, "mbox appended")]
        text += "".join(f", {n:,} {what}" for n, what in extra if n)
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.messages.as_dict(),
            "files": self.files,
            "new": self.new,
            "changed": self.changed,
            "flagChanges": self.flag_changes,
            "moved": self.moved,
            "gone": self.gone,
            "removed": self.removed,
            "appended": self.appended,
            "unchanged": self.unchanged,
        }

    def lines(self) -> list[str]:
        out = self.messages.lines()
        if self.messages.processed == 0 and not (self.messages.interrupted or self.messages.aborted):
            out = [line for line in out if not line.startswith("0 messages")]
        out.append(self.summary())
        return out


@dataclass
class _Mbox:
    """An mbox being read: ``confirmed`` / ``count`` move as its messages' results come."""

    path: str
    dir: str
    full: str
    st: os.stat_result
    record: Mapping[str, Any] | None
    order: int = 0
    confirmed: int = 0
    count: int = 0
    complete: bool = False  # read to its end: its size and mtime may be recorded
    fresh: bool = True  # its messages' records are new (not so for a rescan from the start)


@dataclass
class _Unit:
    """One message handed to the store (or skipped), and the record to write once it is confirmed."""

    source: _Source
    listed: Listed | None = None  # a message file
    mbox: _Mbox | None = None  # an mbox message (``offset``; ``end`` and ``number`` of its entry)
    offset: int | None = None  # None with ``mbox``: the mark after its last message
    end: int = 0
    number: int = 0
    sha256: str = ""
    done: bool = False
    result: StoreResult | None = None
    skipped: str | None = None
    fresh: bool = False  # no record of it yet: inserted (cheaper than an upsert)


@dataclass
class _Source:
    root: str
    full: str
    is_file: bool = False
    dir_records: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    listed: list[Listed] = field(default_factory=list)
    plain: list[tuple[Listed, os.stat_result]] = field(default_factory=list)  # files of plain directories
    mboxes: list[_Mbox] = field(default_factory=list)
    seen_dirs: dict[str, tuple[int | None, bool]] = field(default_factory=dict)  # dir -> (mtime, listed)
    listings: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)  # dir -> (name, inode, order)
    retry: set[str] = field(default_factory=set)  # directories with a file that could not be read
    unreadable: set[str] = field(default_factory=set)  # directories that could not be listed

    def vanished(self) -> set[str]:
        """Recorded directories the walk did not find, where it could look (a directory that
        could not be listed, or whose parent could not, is not gone: its files are not counted
        gone)."""
        missing = set(self.dir_records) - set(self.seen_dirs)
        return {
            d for d in missing if not any(u in ("", d) or d.startswith(u.rstrip("/") + "/") for u in self.unreadable)
        }

    counts: dict[str, int] = field(default_factory=dict)  # dir -> message files in it
    failures: list[tuple[int, Skipped]] = field(default_factory=list)
    complete: bool = True
    walked: int = 0  # the order of the next thing the walk finds

    def next(self) -> int:
        self.walked += 1
        return self.walked

    def fail(self, skipped: Skipped) -> None:
        self.failures.append((self.next(), skipped))

    def abs(self, path: str) -> str:
        return self.full if self.is_file else os.path.join(self.full, path)


def _stat_numbers(st: os.stat_result) -> tuple[int, int, int]:
    """A file's inode, size and mtime as its record stores them (each fits a signed 64-bit int)."""
    return fr.int64(st.st_ino), fr.int64(st.st_size), fr.int64(st.st_mtime_ns)


def _is_maildir(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "cur")) and os.path.isdir(os.path.join(path, "new"))


class _Walker:
    def __init__(self, source: _Source, rescan: bool, now_ns: int) -> None:
        self.s = source
        self.rescan = rescan
        self.now_ns = now_ns

    def _scandir(self, rel: str) -> list[os.DirEntry[str]] | None:
        try:
            with os.scandir(self.s.abs(rel) if rel else self.s.full) as entries:
                return sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            self.s.fail(Skipped(Origin(self.s.abs(rel)), f"cannot read directory: {exc.strerror or exc}"))
            self.s.complete = False
            self.s.unreadable.add(rel)
            return None

    def walk(self, rel: str = "") -> None:
        if _is_maildir(self.s.abs(rel) if rel else self.s.full):
            self.maildir(rel)
        else:
            self.plain(rel)

    def maildir(self, rel: str) -> None:
        for sub in ("new", "cur"):
            self.maildir_dir(os.path.join(rel, sub) if rel else sub)
        for entry in self._scandir(rel) or ():
            child = os.path.join(rel, entry.name) if rel else entry.name
            if entry.name.startswith(".") and entry.is_dir() and _is_maildir(entry.path):
                self.maildir(child)

    def maildir_dir(self, rel: str) -> None:
        try:
            mtime = os.stat(self.s.abs(rel)).st_mtime_ns
        except OSError as exc:
            self.s.fail(Skipped(Origin(self.s.abs(rel)), f"cannot read directory: {exc.strerror or exc}"))
            self.s.complete = False
            self.s.unreadable.add(rel)
            return
        trusted = fr.int64(mtime) if fr.mtime_trusted(mtime, self.now_ns) else None
        record = self.s.dir_records.get(rel)
        if record is not None and not self.rescan and record.get("mtimeNs") == fr.int64(mtime):
            self.s.seen_dirs[rel] = (fr.int64(mtime), False)
            self.s.counts[rel] = int(record.get("files") or 0)
            return
        entries = self._scandir(rel)
        if entries is None:
            return
        self.s.seen_dirs[rel] = (trusted, True)
        listing = [
            (e.name, fr.int64(e.inode()), self.s.next()) for e in entries if not e.name.startswith(".") and e.is_file()
        ]
        self.s.listings[rel] = listing
        self.s.counts[rel] = len(listing)

    def plain(self, rel: str) -> None:
        entries = self._scandir(rel)
        if entries is None:
            return
        self.s.seen_dirs[rel] = (None, True)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            child = os.path.join(rel, entry.name) if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    self.walk(child)
                    continue
                st = entry.stat()
            except OSError as exc:
                self.s.fail(Skipped(Origin(entry.path), f"cannot read: {exc.strerror or exc}"))
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            listed = Listed("file", child, child, rel, *_stat_numbers(st), self.s.next())
            self.s.plain.append((listed, st))


def _block_hashes(path: str, offset: int) -> tuple[str, str]:
    """SHA-256 of the first block of the file and of the block that ends at ``offset``."""
    with open(path, "rb") as f:
        head = f.read(min(fr.HASH_BLOCK, offset))
        start = max(0, offset - fr.HASH_BLOCK)
        f.seek(start)
        tail = f.read(offset - start)
    return hashlib.sha256(head).hexdigest(), hashlib.sha256(tail).hexdigest()


@dataclass
class _SourcePlan:
    source: _Source
    result: fr.Plan
    gone_mboxes: list[Mapping[str, Any]]


class _Sync:
    def __init__(
        self, store: MessageStore, report: FileSyncReport, *, remove_missing: bool, rescan: bool, batch_size: int
    ):
        self.store = store
        self.mailbox = store.mailbox_id
        self.records = store.file_records
        self.remove_missing = remove_missing
        self.rescan = rescan
        self.batch_size = batch_size
        self.report = report
        self.lock = threading.Lock()  # the units are made on store_iter's worker thread
        self.pending: deque[_Unit] = deque()
        self.handed: dict[int, _Unit] = {}  # the messages handed to the store, by store_iter's index
        self.next_index = 0
        self.writes: list[RecordWrite] = []
        self.dirty: dict[int, tuple[_Source, _Mbox]] = {}
        self.marks: list[RecordWrite] = []  # the gone marks to write
        self.roots: set[str] = set()  # the roots of this run (remove_missing looks at their marks)
        self.exhausted = False
        self._keywords: dict[str, Mapping[str, str] | None] = {}

    # --- listing and planning -----------------------------------------------------------------

    def open(self, name: str | os.PathLike[str]) -> _Source | Skipped:
        full = os.path.abspath(os.path.expanduser(os.fspath(name)))
        if os.path.isdir(full):
            return _Source(full, full)
        if os.path.exists(full):
            return _Source(full, full, is_file=True)
        return Skipped(Origin(os.fspath(name)), "no such file or directory")

    def survey(self, source: _Source) -> _SourcePlan:
        """List ``source`` and read the records that the listing needs compared."""
        root = fr.dump_name(source.root)
        files: list[Listed] = []
        read_dirs: set[str] = set()  # directories whose every record is read
        keys: set[str] = set()  # Maildir keys whose record is read by _id
        if source.is_file:
            try:
                st = os.stat(source.full)
            except OSError as exc:
                source.fail(Skipped(Origin(source.full), f"cannot read: {exc.strerror or exc}"))
                return _SourcePlan(source, fr.Plan(), [])
            source.plain.append((Listed("file", "", "", "", *_stat_numbers(st)), st))
            read_dirs.add("")
        else:
            # the names snapshots are read only for the directories that changed
            rows = self.records.directories(root)
            source.dir_records = {fr.load_name(r["path"]): r for r in rows}
            _Walker(source, self.rescan, time.time_ns()).walk()
            changed = [source.dir_records[d]["_id"] for d in source.listings if d in source.dir_records]
            if changed and not self.rescan:
                snapshots = self.records.name_snapshots(changed)
                for directory in source.listings:
                    record = source.dir_records.get(directory)
                    if record is not None:
                        source.dir_records[directory] = {**record, "names": snapshots.get(record["_id"])}
            for directory, (_, was_listed) in source.seen_dirs.items():
                if was_listed and directory not in source.listings:
                    read_dirs.add(directory)  # a plain directory
            read_dirs |= source.vanished()
            for directory, listing in source.listings.items():
                names = (source.dir_records.get(directory) or {}).get("names")
                if names is None or self.rescan:
                    read_dirs.add(directory)
                    came: set[str] | None = None
                else:
                    came, went = fr.listing_changes(names, (name for name, _, _ in listing))
                    keys |= {fr.maildir_key(name) for name in came | went}
                    self.report.unchanged += len(listing) - len(came)
                for name, inode, order in listing:
                    if came is None or name in came:
                        path = os.path.join(directory, name)
                        files.append(Listed("maildir", fr.maildir_key(name), path, directory, inode, order=order))
        found = self._records(root, read_dirs, keys)
        mbox_records = {fr.load_name(r["key"]): r for r in found if r.get("kind") == "mbox"}
        for listed, st in source.plain:
            record = mbox_records.pop(listed.key, None)
            full = source.abs(listed.path)
            if record is not None or full.lower().endswith(".mbox") or (source.is_file and _named_mbox(full)):
                source.mboxes.append(_Mbox(listed.path, listed.dir, full, st, record, listed.order))
            else:
                files.append(listed)
        return _SourcePlan(source, fr.plan(files, found, rescan=self.rescan), list(mbox_records.values()))

    def _records(self, root: Any, read_dirs: set[str], keys: set[str]) -> list[Mapping[str, Any]]:
        """The records of ``read_dirs`` (one query on the index) and of Maildir ``keys`` (by ``_id``)."""
        found: dict[str, Mapping[str, Any]] = {}
        if read_dirs:
            dirs = [fr.dump_name(d) for d in sorted(read_dirs)]
            found.update((r["_id"], r) for r in self.records.in_directories(root, dirs))
        ids = sorted(fr.record_id(self.mailbox, fr.load_name(root), key) for key in keys)
        found.update((r["_id"], r) for r in self.records.by_ids(ids))
        return list(found.values())

    def keywords(self, source: _Source, directory: str) -> Mapping[str, str] | None:
        """The Dovecot keyword letters of the Maildir that holds ``directory`` (its
        ``dovecot-keywords`` file), read once per run."""
        maildir = source.abs(os.path.dirname(directory))
        if maildir not in self._keywords:
            try:
                with open(os.path.join(maildir, "dovecot-keywords"), encoding="utf-8", errors="replace") as f:
                    self._keywords[maildir] = flags.dovecot_keywords(f.read())
            except OSError:
                self._keywords[maildir] = None
        return self._keywords[maildir]

    # --- what changes without reading a file ----------------------------------------------------

    def apply_moves(self, plan: _SourcePlan) -> None:
        changes: dict[tuple[frozenset[str], frozenset[str]], list[str]] = {}
        folder_moves: dict[tuple[str, str], list[str]] = {}
        updates = []
        for record, listed in plan.result.moved:
            old_dir, old_name = os.path.split(fr.load_name(record["path"]))
            new_dir, new_name = os.path.split(listed.path)
            old_tags = _maildir_tags(old_dir, old_name, self.keywords(plan.source, old_dir))
            new_tags = _maildir_tags(new_dir, new_name, self.keywords(plan.source, new_dir))
            message_id = record.get("messageId")
            if message_id and old_tags != new_tags:
                changes.setdefault((new_tags - old_tags, old_tags - new_tags), []).append(message_id)
                self.report.flag_changes += 1
            old_folder, new_folder = _folder(old_dir), _folder(new_dir)
            if message_id and old_folder != new_folder:
                folder_moves.setdefault((new_folder, old_folder), []).append(message_id)
                self.report.moved += 1
            fields = {"path": fr.dump_name(listed.path), "dir": fr.dump_name(listed.dir), "inode": listed.inode}
            updates.append(fr.set_record_fields(record["_id"], fields))
        for (add, remove), ids in changes.items():
            self.store.tag(ids, add=sorted(add), remove=sorted(remove))
        for (add_folder, remove_folder), ids in folder_moves.items():
            self.store.set_folders(ids, add=[add_folder], remove=[remove_folder])
        if updates:  # after the tags: a run that dies between the two applies the change again
            self.records.write(updates)

    def drop_gone(self, plan: _SourcePlan) -> None:
        gone = [*plan.result.gone, *plan.gone_mboxes]
        for record in gone:
            self._lose(plan.source, record)
            if record.get("kind") == "mbox":  # the messages of a vanished mbox
                self._drop_mbox_messages(plan.source, fr.load_name(record["path"]))
        for record, _ in plan.result.changed:  # its record is replaced once the new content is stored
            self._lose(plan.source, record)
        self._write_marks()
        if gone:
            self.records.write([fr.delete_record(r["_id"]) for r in gone])
        self.report.gone += len(gone)

    def _lose(self, source: _Source, record: Mapping[str, Any]) -> None:
        """Mark the message of a record that goes (written before the record is deleted)."""
        if record.get("messageKey") and record.get("messageId"):
            doc = fr.gone_document(self.mailbox, source.root, record["messageKey"], record["messageId"])
            self.marks.append(fr.replace_record(doc))
            self.roots.add(source.root)

    def _write_marks(self) -> None:
        if self.marks:
            marks, self.marks = self.marks, []
            self.records.write(marks)

    def _drop_mbox_messages(self, source: _Source, path: str) -> None:
        root, directory = fr.dump_name(source.root), _mbox_dir(path)
        for row in self.records.messages_in(root, directory):
            self._lose(source, row)
        self._write_marks()
        self.records.drop_directory(root, directory)

    def remove_lost(self) -> None:
        """``remove_missing``: the messages marked gone under the run's roots (this run or an
        earlier one) that no record holds any more are removed; the marks are dropped."""
        if not self.remove_missing:
            return
        roots = [fr.dump_name(root) for root in sorted(self.roots)]
        marks = self.records.gone_marks(roots)
        lost = {m["messageKey"]: (m["messageId"], m["_id"]) for m in marks}
        keys = sorted(lost)
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            kept = self.records.still_held(chunk)
            for key in chunk:
                if key not in kept and self.store.delete(lost[key][0]):
                    self.report.removed += 1
            self.records.delete([lost[key][1] for key in chunk])

    # --- reading and storing --------------------------------------------------------------------

    def units(self, plans: list[_SourcePlan]) -> Iterator[RawMessage | Skipped]:
        """What each source has to read, in the order its walk found it: new and changed files,
        mbox files, and what could not be listed."""
        for plan in plans:
            source = plan.source
            self.report.changed += len(plan.result.changed)
            self.report.new += len(plan.result.new)
            work: list[tuple[int, Listed | _Mbox | Skipped]] = list(source.failures)
            work += [(listed.order, listed) for _, listed in plan.result.changed]
            work += [(listed.order, listed) for listed in plan.result.reread]
            fresh = {id(listed) for listed in plan.result.new}
            work += [(listed.order, listed) for listed in plan.result.new]
            work += [(mbox.order, mbox) for mbox in source.mboxes]
            for _, thing in sorted(work, key=lambda pair: pair[0]):
                if isinstance(thing, Skipped):
                    yield thing
                elif isinstance(thing, Listed):
                    yield from self._read_file(source, thing, id(thing) in fresh)
                else:
                    yield from self._read_mbox(source, thing)
        self.exhausted = True

    def _add(self, unit: _Unit, item: RawMessage | None = None) -> None:
        with self.lock:
            self.pending.append(unit)
            if item is not None:
                self.handed[self.next_index] = unit
                self.next_index += 1

    def _read_file(self, source: _Source, listed: Listed, fresh: bool = False) -> Iterator[RawMessage | Skipped]:
        path = source.abs(listed.path)
        if listed.kind == "file" and not path.lower().endswith(".eml") and not source.is_file:
            kind = sniff(path)
            if kind == "mbox":
                self.report.new -= 1  # counted as an mbox
                yield from self._read_mbox(
                    source, _Mbox(listed.path, listed.dir, path, os.stat(path), None, listed.order)
                )
                return
            if kind != "eml":
                self._add(_Unit(source, listed, done=True, skipped=kind, fresh=fresh))
                yield Skipped(Origin(path), kind, ignored=True)
                return
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except OSError as exc:
            source.retry.add(listed.dir)  # listed again next time, with this file
            yield Skipped(Origin(path), f"cannot read: {exc.strerror or exc}")
            return
        if listed.size is None:  # a Maildir file: stat'ed only now that it is read
            listed = Listed(listed.kind, listed.key, listed.path, listed.dir, *_stat_numbers(st))
        unit = _Unit(source, listed, sha256=hashlib.sha256(data).hexdigest(), fresh=fresh)
        problem = not_mail(data)
        if problem is not None:
            unit.done, unit.skipped = True, problem
            self._add(unit)
            yield Skipped(Origin(path), problem, len(data))
            return
        received = _dt.datetime.fromtimestamp(st.st_mtime_ns // 1_000_000_000, _dt.UTC)
        tags: tuple[str, ...] = ()
        folders: tuple[str, ...] = ()
        if listed.kind == "maildir":
            keywords = self.keywords(source, listed.dir)
            tags = tuple(sorted(_maildir_tags(listed.dir, os.path.basename(listed.path), keywords)))
            folders = (_folder(listed.dir),)
        item = RawMessage(data, Origin(path), len(data), received, tags, folders)
        self._add(unit, item)
        yield item

    def _read_mbox(self, source: _Source, mbox: _Mbox) -> Iterator[RawMessage | Skipped]:
        record, st = mbox.record, mbox.st
        if record is None:
            self.report.new += 1
        elif not self.rescan and (record.get("inode"), record.get("size"), record.get("mtimeNs")) == _stat_numbers(st):
            self.report.unchanged += 1
            return
        else:
            offset = int(record.get("offset") or 0)
            try:
                hashes = _block_hashes(mbox.full, offset) if st.st_size >= offset else None
            except OSError:
                hashes = None
            same_start = hashes == (record.get("headHash"), record.get("tailHash"))
            if same_start and self.rescan:  # read again from the start, its records rewritten in place
                mbox.fresh = False
            elif same_start:
                mbox.confirmed, mbox.count = offset, int(record.get("messages") or 0)
                self.report.appended += 1
            else:  # rewritten in place: read in full (what was stored is found present)
                self.report.changed += 1
                self._drop_mbox_messages(source, mbox.path)
        start, first = mbox.confirmed, mbox.count
        try:
            with open(mbox.full, "rb") as f:
                f.seek(start)
                for entry in iter_mbox(f):
                    offset = start + entry.offset
                    number = first + entry.number
                    origin = Origin(mbox.full, number, offset)
                    if entry.truncated:  # read again once it is complete: the offset stays before it
                        yield Skipped(
                            origin,
                            f"truncated: the file ends inside this message ({entry.size} bytes, no line break at"
                            " the end); not stored",
                            entry.size,
                        )
                        break
                    unit = _Unit(source, mbox=mbox, offset=offset, end=offset + entry.size, number=number)
                    unit.fresh = mbox.fresh
                    unit.sha256 = hashlib.sha256(entry.data).hexdigest()
                    problem = (
                        "data before the first 'From ' line (not an mbox message)"
                        if entry.number == 0
                        else not_mail(entry.data)
                    )
                    if problem is not None:
                        unit.done, unit.skipped = True, problem
                        self._add(unit)
                        yield Skipped(origin, problem, entry.size)
                        continue
                    tags = flags.mbox_header_tags(entry.data)
                    item = RawMessage(entry.data, origin, entry.size, entry.received_at, tags)
                    self._add(unit, item)
                    yield item
        except OSError as exc:
            yield Skipped(Origin(mbox.full), f"cannot read: {exc.strerror or exc}")
            return
        self._add(_Unit(source, mbox=mbox, done=True))  # its record, also when nothing was new

    # --- results --------------------------------------------------------------------------------

    def confirmed(self, result: StoreResult) -> None:
        """``store_iter``'s next result: of the oldest message handed out and not refused."""
        with self.lock:
            unit = self.handed.pop(next(iter(self.handed)))
        unit.done, unit.result = True, result
        self.collect()

    def refused(self, index: int, item: object, exc: Exception) -> None:
        with self.lock:
            unit = self.handed.pop(index)
        unit.done, unit.skipped = True, f"refused by the store: {exc}"
        self.report.messages.refused(index, item, exc)

    def collect(self) -> None:
        """Records for the confirmed units at the head of the queue (in hand-out order)."""
        while True:
            with self.lock:
                if not self.pending or not self.pending[0].done:
                    break
                unit = self.pending.popleft()
            source = unit.source
            result = unit.result
            fields: dict[str, Any] = {"sha256": unit.sha256, "skipped": unit.skipped}
            if result is not None:
                fields.update(message_key=result.message_key, message_id=result.message_id)
            if unit.listed is not None:
                doc = fr.file_document(self.mailbox, source.root, unit.listed, **fields)
                self.writes.append(fr.insert_record(doc) if unit.fresh else fr.replace_record(doc))
            elif unit.mbox is not None:
                mbox = unit.mbox
                if unit.offset is not None:
                    doc = fr.mbox_message_document(
                        self.mailbox, source.root, mbox.path, _mbox_dir(mbox.path), unit.offset, **fields
                    )
                    self.writes.append(fr.insert_record(doc) if unit.fresh else fr.replace_record(doc))
                    mbox.confirmed, mbox.count = unit.end, unit.number
                else:  # the mark after its last message
                    mbox.complete = True
                self.dirty[id(mbox)] = (source, mbox)
        if len(self.writes) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Write the records collected (the mbox positions after their messages' records)."""
        for source, mbox in self.dirty.values():
            try:
                head, tail = _block_hashes(mbox.full, mbox.confirmed)
            except OSError:
                continue  # gone meanwhile: the next run finds it gone
            # size and mtime only once read to the end: a run that stopped halfway leaves the
            # next one to compare the hashes and read on from the offset
            doc = fr.mbox_document(
                self.mailbox,
                source.root,
                mbox.path,
                mbox.dir,
                size=fr.int64(mbox.st.st_size) if mbox.complete else None,
                mtime_ns=fr.int64(mbox.st.st_mtime_ns) if mbox.complete else None,
                inode=fr.int64(mbox.st.st_ino),
                offset=mbox.confirmed,
                head_hash=head,
                tail_hash=tail,
                messages=mbox.count,
            )
            self.writes.append(fr.replace_record(doc))
        self.dirty.clear()
        if self.writes:
            writes, self.writes = self.writes, []
            self.records.write(writes)

    def finish(self, plans: list[_SourcePlan]) -> None:
        """Once every message was dealt with: the directories' mtimes (a Maildir directory with
        the mtime recorded is not listed next time)."""
        writes: list[RecordWrite] = []
        for plan in plans:
            source = plan.source
            if not source.complete:
                continue
            for directory, (mtime, listed) in source.seen_dirs.items():
                if listed and directory not in source.retry:
                    listing = source.listings.get(directory)
                    names = None if listing is None else [name for name, _, _ in listing]
                    doc = fr.dir_document(
                        self.mailbox, source.root, directory, mtime, source.counts.get(directory, 0), names
                    )
                    writes.append(fr.replace_record(doc))
            writes += [fr.delete_record(source.dir_records[d]["_id"]) for d in source.vanished()]
        if writes:
            self.records.write(writes)


def _journal(store: MessageStore) -> None:
    """A durable store's run ends on a journaled write, as each of its batches does (``j: true``
    on the write that completes it): the records written after the last batch of messages (positions,
    directory mtimes, gone marks) went out unjournaled, so one barrier under the completion
    concern makes them durable with the run's return. Nothing where the store is not durable."""
    store.wait_durable()


def _named_mbox(path: str) -> bool:
    if path.lower().endswith(".eml"):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(5) == b"From "
    except OSError:
        return False


def _mbox_dir(path: str) -> Any:
    return fr.dump_name(f"mbox:{path}")


def _to_read(plans: list[_SourcePlan]) -> tuple[int | None, int]:
    """How many messages the plans read, and their bytes (see ``sync_files``' ``on_survey``)."""
    count, size, counted, sized = 0, 0, True, True
    for plan in plans:
        source = plan.source
        listed = [*(item for _, item in plan.result.changed), *plan.result.reread, *plan.result.new]
        count += len(source.failures) + len(listed)
        counted = counted and not source.mboxes
        for item in listed:
            if item.kind == "file" and not source.is_file and not item.path.lower().endswith(".eml"):
                counted = False  # sniffed when read: an mbox, a message or not mail
            sized = sized and item.size is not None
            size += item.size or 0
    return (count if counted else None), (size if sized else 0)


def sync_files(
    store: MessageStore,
    paths: Iterable[str | os.PathLike[str]],
    *,
    remove_missing: bool = False,
    rescan: bool = False,
    batch_size: int = 100,
    items_filter: Callable[[Iterator[RawMessage | Skipped]], Iterator[RawMessage | Skipped]] | None = None,
    report: FileSyncReport | None = None,
    tags: Iterable[str] = (),
    on_survey: Callable[[int | None, int], None] | None = None,
) -> FileSyncReport:
    """Store what is new or changed under ``paths`` (Maildir folders, directories, mbox and
    message files) since the last run into this mailbox, and follow renames, moves and
    deletions (the module docstring says how). ``store`` is a ``MessageStore``.

    ``remove_missing``: a message whose every source file is gone (and that no IMAP record
    holds) is removed from the store. ``rescan``: read every file again (the records are
    rewritten; what was stored is found ``present``). ``items_filter`` wraps the stream of
    messages handed to the store (the command line's progress and stop request). ``report``:
    tallied into as the run goes, so a caller that catches an interrupt has what was done.
    ``tags``: set on every message stored new (``store_iter``'s ``tags``). ``on_survey``: called
    once the sources are listed, before anything is read, with how many messages are to be read
    (None where an mbox or a file of a kind still to be sniffed is among them) and their bytes
    (0 where a size is not known: a Maildir file is stat'ed only when read): a progress line's totals.

    The store's errors propagate, after the records of what was stored are written; a run
    interrupted anywhere is continued by the next one.
    """
    report = report if report is not None else FileSyncReport()
    sync = _Sync(store, report, remove_missing=remove_missing, rescan=rescan, batch_size=batch_size)
    started = time.monotonic()
    tally = report.messages
    plans: list[_SourcePlan] = []
    for name in paths:
        source = sync.open(name)
        if isinstance(source, Skipped):
            tally.skip(source)
            continue
        plan = sync.survey(source)
        plans.append(plan)
        sync.roots.add(source.root)
        report.files += sum(source.counts.values()) + len(source.plain)
        report.unchanged += plan.result.same
        report.unchanged += sum(source.counts[d] for d, (_, listed) in source.seen_dirs.items() if not listed)
        sync.apply_moves(plan)
        sync.drop_gone(plan)
    if on_survey is not None:
        on_survey(*_to_read(plans))
    items: Iterator[RawMessage | Skipped] = sync.units(plans)
    if items_filter is not None:
        items = items_filter(items)
    tracked = tally.track(items)
    try:
        for result in store.store_iter(tracked, batch_size=batch_size, on_error=sync.refused, tags=tags):
            tally.count(result)
            sync.confirmed(result)
    except BaseException:
        tracked.close()
        with contextlib.suppress(Exception):  # the database may be what failed
            sync.collect()
            sync.flush()
        tally.seconds = time.monotonic() - started
        raise
    tracked.close()
    sync.collect()  # what is done after the last result: skipped files, the marks after mbox files
    sync.flush()
    if sync.exhausted:
        sync.remove_lost()
        sync.finish(plans)
    _journal(store)
    tally.seconds = time.monotonic() - started
    return report
