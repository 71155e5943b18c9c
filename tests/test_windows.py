"""windows.py on its own: the windows tile the read exactly (same rows, order and page ends as
the plain keyset query) whatever the mail looks like, and a page costs about a page."""

from __future__ import annotations

import dataclasses
import hashlib
import random

import pytest

from aecs_mongo.pure import windows
from aecs_mongo.pure.windows import SAMPLE_ENOUGH, SAMPLE_FRACTIONS, Window, WindowedRead, key_between, walk

NOW = 1_800_000_000


def _key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def _inside(row: tuple[int, str], w: Window) -> bool:
    ts, key = row
    if w.second is not None:
        return ts == w.second and (w.key_lo is None or key >= w.key_lo) and (w.key_hi is None or key < w.key_hi)
    bounds = w.conditions("ts", "key").get("ts", {})
    return ts >= bounds.get("$gte", ts) and ts < bounds.get("$lt", ts + 1)


def hinted(read: WindowedRead, rows: list[tuple[int, str]]) -> WindowedRead:
    """``read`` with the sample the store takes: the messages whose key falls in the first
    fraction of the key space, the fraction growing until the sample holds enough."""
    for fraction in SAMPLE_FRACTIONS:
        bound = key_between("", fraction) if fraction < 1 else "g"
        sample = sorted(ts for ts, key in rows if key < bound)
        if len(sample) >= SAMPLE_ENOUGH or fraction == 1:
            break
    return WindowedRead(read.descending, read.now, read.lo, read.hi, read.key_prefix, tuple(sample), fraction)


def windowed(
    rows: list[tuple[int, str]], read: WindowedRead, after: tuple[int, str] | None, need: int
) -> tuple[list[tuple[int, str]], int, int]:
    """What the store does with the windows: (page rows, rows the server read, queries)."""
    order = sorted(rows, reverse=read.descending)
    walker = walk(read, after, need)
    out: list[tuple[int, str]] = []
    read_rows = queries = 0
    try:
        window = next(walker)
        while True:
            matched = [r for r in order if _inside(r, window)]
            read_rows += len(matched)
            queries += 1
            if not window.probe:
                matched = matched[: need - len(out)]
                out += matched
                if len(out) >= need:
                    break
            window = walker.send(len(matched))
    except StopIteration:
        pass
    return out, read_rows, queries


def plain(
    rows: list[tuple[int, str]], read: WindowedRead, after: tuple[int, str] | None, need: int
) -> list[tuple[int, str]]:
    order = sorted(rows, reverse=read.descending)
    if read.lo is not None:
        order = [r for r in order if r[0] >= read.lo]
    if read.hi is not None:
        order = [r for r in order if r[0] < read.hi]
    if after is not None:
        order = [r for r in order if (r < after if read.descending else r > after)]
    return order[:need]


def mailbox(rng: random.Random, kind: str, size: int) -> list[tuple[int, str]]:
    if kind == "steady":
        return [(NOW - 3600 - n * 37, _key(n)) for n in range(size)]
    if kind == "bunched":  # a third is Date-less: ingested at 400 a second, sorted by processedAt
        spread = [(NOW - 3600 - n * 37, _key(n)) for n in range(size - size // 3)]
        return spread + [(NOW - 3600 - 37 * size // 3 + n // 400, _key(-n - 1)) for n in range(size // 3)]
    if kind == "undated":  # a third Date-less, newest of all: one ingest put them in two seconds
        dated = [(NOW - 3600 - n * 37, _key(n)) for n in range(size - size // 3)]
        return dated + [(NOW - 60 + n % 2, _key(-n - 1)) for n in range(size // 3)]
    if kind == "clump":  # everything within 90 seconds, 700 to a second
        return [(NOW - 5000 + (n // 700) * 3, _key(n)) for n in range(size)]
    if kind == "archive":  # old mail, a gap of years, a few recent ones, one from the future, one at 0
        old = [(NOW - 8 * 365 * 86_400 + n * 600, _key(n)) for n in range(size)]
        return [*old, (NOW - 100, _key(-1)), (NOW - 5000, _key(-2)), (NOW + 10 * 365 * 86_400, _key(-3)), (0, _key(-4))]
    # random: clusters, gaps, duplicates of ts
    out = []
    for n in range(size):
        base = rng.choice([NOW - 86_400 * rng.randint(0, 4000), NOW - rng.randint(0, 100), 0, -86_400 * 400])
        out.append((base + rng.randint(0, 3) * rng.choice([0, 1, 60, 3600]), _key(n)))
    return out


@pytest.mark.parametrize("kind", ["steady", "bunched", "undated", "clump", "archive", "random"])
@pytest.mark.parametrize("descending", [True, False])
def test_pages_equal_the_plain_query_across_every_window_edge(kind: str, descending: bool) -> None:
    rng = random.Random(f"{kind}{descending}")
    rows = mailbox(rng, kind, 1200)
    for bounds in [(None, None), (NOW - 86_400 * 20, None), (None, NOW - 4000), (NOW - 6000, NOW - 3000)]:
        read = WindowedRead(descending=descending, now=NOW, lo=bounds[0], hi=bounds[1])
        if rng.random() < 0.5:
            read = hinted(read, rows)
        after = None
        pages = 0
        while True:
            need = rng.choice([1, 7, 51, 200])
            got, _, _ = windowed(rows, read, after, need)
            assert got == plain(rows, read, after, need), (kind, bounds, after, need)
            if len(got) < need:
                break
            after = got[-1]
            pages += 1
            if pages > 15:  # enough pages: jump somewhere else in the mailbox
                after = rng.choice(rows)
                pages = 0
                if rng.random() < 0.2:
                    break


@pytest.mark.parametrize("kind", ["steady", "bunched", "undated", "archive", "old"])
def test_a_page_costs_a_page(kind: str) -> None:
    """Rows read (the sample's included) and queries for the first page and a page in the middle
    stay about the same from 1,000 to 20,000 messages (the plain query reads them all): an active
    mailbox, one with a third of it bunched at 400 a second, one whose newest third is Date-less
    mail that one ingest put in two seconds (thousands in one second: the first page read all
    of them, 103 ms at 20,000 on the embedded server, before), an archive years old with a few
    recent messages, and a mailbox whose newest mail is months old."""
    rng = random.Random(kind)
    cost = {}
    for size in (1000, 20_000):
        rows = mailbox(rng, "steady" if kind == "old" else kind, size)
        read = hinted(WindowedRead(descending=True, now=NOW + (150 * 86_400 if kind == "old" else 0)), rows)
        first, read1, queries1 = windowed(rows, read, None, 51)
        middle = sorted(rows, reverse=True)[size // 2]  # bunched: inside a second of 400
        _, read2, queries2 = windowed(rows, read, middle, 51)
        assert first == plain(rows, read, None, 51)
        cost[size] = (read1 + len(read.hint), read2 + len(read.hint), queries1, queries2)
    small, big = cost[1000], cost[20_000]
    for i in range(2):
        assert big[i] <= max(2 * small[i], 300), (kind, cost)
    for i in (2, 3):
        assert big[i] <= small[i] + 10, (kind, cost)


def test_a_summary_hint_holds_the_first_and_last_message_and_stands_for_the_count() -> None:
    hint, fraction = windows.summary_hint(250, 1_000, 10_000)
    assert hint[0] == 1_000 and hint[-1] == 10_000 and list(hint) == sorted(set(hint))
    assert len(hint) == 64 and fraction == 64 / 250
    assert windows.summary_hint(3, 1_000, 1_300) == ((1_000, 1_150, 1_300), 1.0)
    # a thread in one second (mail without a Date, stored at once): one point for all of it
    assert windows.summary_hint(500, 7, 7) == ((7,), 1 / 500)


def test_a_sampled_message_stands_for_a_share_of_its_thread() -> None:
    # the whole mailbox sampled: exact (two threads of 3 and one of 1)
    assert windows.estimated_threads([3, 3, 3, 1], 1.0) == pytest.approx(2.0)
    # 1/256: 16 sampled messages of threads of 250 stand for few threads, of singletons for many
    few, many = windows.estimated_threads([250] * 16, 1 / 256), windows.estimated_threads([1] * 16, 1 / 256)
    assert few < windows.PLAIN_MAX_THREADS < many
    assert many >= 16 * 256  # an upper estimate: never under what the sample shows
    assert windows.estimated_threads([0, 2], 1.0) == pytest.approx(1.5)  # a missing summary counts as one


def test_the_thread_sample_holds_about_as_many_messages_as_it_needs() -> None:
    enough = windows.THREAD_SAMPLE_ENOUGH
    for mailbox in (4_000, 10_000, 50_000, 100_000, 1_000_000):
        small = windows.SAMPLE_FRACTIONS[0]
        wanted = windows.thread_sample_fraction(round(mailbox * small), small)
        assert enough <= wanted * mailbox < 2 * enough + 1, (mailbox, wanted)
    assert windows.thread_sample_fraction(12, 1 / 16) == 1.0  # a mailbox of 192: all of it
    assert windows.thread_sample_fraction(0, 1.0) == 1.0


def test_a_page_after_a_cursor_in_steady_mail_is_one_window() -> None:
    """Where the sample says the mail goes on past the cursor, the page after it is the rest of
    the cursor's second and one window sized for it (the walk probed its way down before: 13
    queries at 100,000 messages); and where the sampled mail stands beyond a gap, the walk still
    finds it (the page equals the plain query's)."""
    rows = mailbox(random.Random(1), "steady", 20_000)
    read = hinted(WindowedRead(descending=True, now=NOW), rows)
    cursor = sorted(rows, reverse=True)[10_000]
    page, _, queries = windowed(rows, read, cursor, 51)
    assert page == plain(rows, read, cursor, 51)
    assert queries <= 3, queries
    gapped = [r for r in rows if not NOW - 3600 - 12_000 * 37 < r[0] < NOW - 3600 - 10_001 * 37]
    read = hinted(WindowedRead(descending=True, now=NOW), gapped)
    page, _, _ = windowed(gapped, read, cursor, 51)
    assert page == plain(gapped, read, cursor, 51)


@pytest.mark.parametrize("size", [1500, 20_000])
def test_a_first_page_starts_from_the_newest_mail_not_the_clock(size: int) -> None:
    """The newest mail three years before the clock (an archive) or an hour before it: the first
    page costs the same windows (it starts from the newest sampled mail, not bisecting the years
    from the clock down: 17 to 20 queries at 1,500 messages before), and at 1,500 messages one
    window past the sample."""
    rows = mailbox(random.Random(size), "steady", size)
    costs = set()
    for age in (0, 150 * 86_400, 3 * 365 * 86_400):
        read = hinted(WindowedRead(descending=True, now=NOW + age), rows)
        page, read_rows, queries = windowed(rows, read, None, 51)
        assert page == plain(rows, read, None, 51)
        costs.add((read_rows, queries))
    assert len(costs) == 1, costs
    (read_rows, queries) = costs.pop()
    assert queries <= (2 if size == 1500 else 10) and read_rows <= 3 * 51, (read_rows, queries)


@pytest.mark.parametrize("kind", ["steady", "archive", "bunched"])
def test_a_whole_range_walk_starts_with_a_page_and_reads_every_row_once(kind: str) -> None:
    """A scan walks the whole range (``need=None``) and may stop at its first hits: its first
    windows hold about a page (growing to ``chunk``), and the walk reads every row once, in order."""
    rows = mailbox(random.Random(kind), kind, 5000)
    read = hinted(WindowedRead(descending=True, now=NOW + 3 * 365 * 86_400), rows)
    order = sorted(rows, reverse=True)
    walker = walk(read, None, None, chunk=500)
    seen: list[tuple[int, str]] = []
    sizes: list[int] = []
    try:
        window = next(walker)
        while True:
            matched = [r for r in order if _inside(r, window)]
            if not window.probe:
                seen += matched
                if matched:
                    sizes.append(len(matched))
            window = walker.send(len(matched))
    except StopIteration:
        pass
    assert seen == order
    assert sum(sizes[:2]) <= 300, sizes[:5]


def _with_extent(
    read: WindowedRead, mailbox_rows: list[tuple[int, str]], read_rows: set[tuple[int, str]]
) -> WindowedRead:
    """``read`` of ``read_rows`` as the store hands it over: the mailbox's sample (the read's
    matches among it as the hint), its ceiling, and the mailbox's oldest and newest ``ts``."""
    sampled = hinted(read, mailbox_rows)
    bound = key_between("", sampled.hint_fraction) if sampled.hint_fraction < 1 else "g"
    hint = tuple(sorted(ts for ts, key in read_rows if key < bound))
    ceiling = windows.read_ceiling(sampled.hint, len(hint), sampled.hint_fraction, read.descending)
    stamps = [ts for ts, _ in mailbox_rows]
    return dataclasses.replace(sampled, hint=hint, ceiling=ceiling, newest=max(stamps), oldest=min(stamps))


@pytest.mark.parametrize("kind", ["steady", "bunched", "undated", "clump", "archive", "random", "old"])
@pytest.mark.parametrize("descending", [True, False])
def test_a_first_page_from_the_mailbox_s_extent_equals_the_plain_query(kind: str, descending: bool) -> None:
    """With the mailbox's oldest and newest mail known (the store keeps them), the pages of a read
    the sample sees (a correspondent in one message of three) and of one it cannot see (its
    matches only where the sample's keys are not) are the plain query's, page after page; and a
    first page of a read the sample cannot see is two windows at most, never a probe: it starts
    from the mailbox's mail, not the clock, three years after it or not."""
    rng = random.Random(f"extent{kind}{descending}")
    rows = mailbox(rng, "steady" if kind == "old" else kind, 1500)
    now = NOW + (3 * 365 * 86_400 if kind in ("old", "archive") else 0)
    sampled = hinted(WindowedRead(descending=descending, now=now), rows)
    bound = key_between("", sampled.hint_fraction) if sampled.hint_fraction < 1 else "g"
    reads = {
        "seen": {r for n, r in enumerate(sorted(rows)) if n % 3 == 0},
        "unseen": {r for n, r in enumerate(sorted(rows)) if r[1] >= bound and n % 5 < 2},
        "rare": {r for n, r in enumerate(sorted(rows)) if r[1] >= bound and n % 100 == 0},
    }
    for name, matching in reads.items():
        mine = sorted(matching)
        for bounds in [(None, None), (None, NOW - 4000), (NOW - 86_400 * 20, None)]:
            read = _with_extent(
                WindowedRead(descending=descending, now=now, lo=bounds[0], hi=bounds[1]), rows, matching
            )
            after = None
            for _ in range(6):
                need = rng.choice([1, 7, 51, 200])
                got, _, queries = windowed(mine, read, after, need)
                assert got == plain(mine, read, after, need), (kind, name, bounds, after, need)
                if after is None and name != "seen":
                    assert queries <= 2, (kind, name, bounds, queries)
                if len(got) < need:
                    break
                after = got[-1]


def test_an_unseen_read_sends_no_probe_and_reads_about_a_page_first() -> None:
    """A read the sample cannot see, in an archive whose newest mail is three years old: its first
    window starts at the mailbox's newest mail (open above it: mail stored since the extent was
    read), sized from the sample's density there, and the rest of the range is one window."""
    rows = mailbox(random.Random(3), "steady", 1500)
    read = hinted(WindowedRead(descending=True, now=NOW + 3 * 365 * 86_400), rows)
    bound = key_between("", read.hint_fraction)
    matching = {r for n, r in enumerate(sorted(rows)) if r[1] >= bound and n % 16 == 0}
    read = _with_extent(WindowedRead(descending=True, now=NOW + 3 * 365 * 86_400), rows, matching)
    assert read.hint == () and read.ceiling > 0
    walker = walk(read, None, 51)
    first = next(walker)
    assert not first.probe and first.hi is None and first.lo is not None and first.lo <= read.newest
    second = walker.send(0)
    assert not second.probe and second.lo is None and second.hi == first.lo
    with pytest.raises(StopIteration):
        walker.send(0)
