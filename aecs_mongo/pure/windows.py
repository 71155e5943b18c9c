"""Windowed reads: a page of a mailbox-sized range, read as bounded ``ts`` windows. Pure: no I/O.

Some servers (the dialect says which, or ``explain`` shows it) read every index entry and document a filter matches
before they sort and apply the limit, even where the index provides the order: a page of
``{mailboxId}`` costs the whole mailbox. A filter bounded on the sort key, though, reads only its
range. So a keyset read is walked as a sequence of disjoint windows in sort order, each a flat
filter (equalities, then one range: what such a server answers from the index bounds):

- whole seconds: ``ts`` in ``[a, b)`` (``lastTs`` for threads);
- part of one second: ``ts == t`` and the tie-breaker (``messageKey``, a uniform SHA-256 hex, or a
  thread's ``_id``) in a key range, for bunched sort keys (mail without a Date falls back to
  ``processedAt``: one ingest puts thousands of messages in the same second);
- probes: narrow ``ts`` windows whose rows only say where the mail is, never part of the answer.

The windows tile the range without gaps or overlap, in the read's order, so rows, order and
cursors are those of the plain query; only the cost differs. ``walk`` is a generator: it yields a
``Window``, is sent back how many rows that window had (at most the ``limit`` the window was
given), and returns when the range is exhausted; the caller stops it as soon as it has its page.

Widths follow the mail: a window is sized from the density seen so far to hold about what is
still needed. Where that density is unknown (below a gap in the mail) ``locate`` finds mail with
narrow probes at doubling distances, then bisects between the nearest probe that found mail and
the empty one before it, so a window never spans a long gap and the dense mail behind it. Where
no probe finds anything, one last open window reads whatever is left.

A first page never starts from the clock where the mailbox's newest ``ts`` is known (kept by the
store where it writes: ``WindowedRead.newest``): from the read's own newest sampled match, capped
at the mailbox's newest; and a read whose matches the sample cannot see (few, then: about what
one sampling interval holds at most) reads one window below the mailbox's newest mail, then the
rest of its range in one statement (``_unseen``): two statements, never probes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KEY_DIGITS",
    "PLAIN_MAX",
    "PLAIN_MAX_THREAD",
    "PLAIN_MAX_THREADS",
    "PLAIN_SEEN",
    "SAMPLE_ENOUGH",
    "SAMPLE_FRACTIONS",
    "SAMPLE_TTL",
    "THREAD_SAMPLE_ENOUGH",
    "Window",
    "WindowedRead",
    "estimated_matches",
    "estimated_threads",
    "key_between",
    "merge_filter",
    "plain_serves",
    "read_ceiling",
    "sample_start",
    "summary_hint",
    "thread_sample_fraction",
    "walk",
    "walk_plain",
]

#: The tie-breakers are 64 lowercase hex digits (SHA-256), after an optional fixed prefix.
KEY_DIGITS = 64
_KEY_SPACE = 16**KEY_DIGITS
#: Probe widths, in seconds, tried in turn: a narrow probe costs little where mail is dense; a
#: wider one finds sparse mail (each round is tried only when the narrower found nothing).
PROBE_WIDTHS = (60, 3600, 86_400)
#: Probes reach back (or forward) at most this far from where the walk stands (about 68 years).
_PROBE_REACH = 2**31
#: Bisection stops when the unknown span above a probe that found mail is this many probe widths.
_BISECT_SPAN = 8
_BISECT_STEPS = 24
#: The first sub-window of a partial second: this fraction of the key space.
_FIRST_KEY_FRACTION = 1 / 256
#: A second the sample puts more rows in than this is read in key ranges (``_bunched_second``).
_BUNCH_ROWS = 256
#: Empty windows double the width this many times before the walk probes instead.
_EMPTY_DOUBLINGS = 2
#: A window is sized for this many times the rows still needed (density fluctuates).
_SLACK = 1.5
#: A window grows at most this factor over the previous one.
_GROWTH = 8
#: Sampled messages the density near a hint is taken from, and messages a hinted probe aims at.
_HINT_NEIGHBOURS = 8
_HINT_PROBE_ROWS = 4
#: A first window is sized from the sample's density (``_hinted_width``) unless the nearest
#: sampled message beyond the edge stands farther than this many sampling intervals (a gap).
_HINT_GAP_SAMPLES = 4
#: A descending first page reads the mail above the newest sampled match in one window where
#: the sample stands for at most this many rows (a probe costs about what reading 20 rows does)
_OPEN_TOP_ROWS = 64
#: Else it starts this many sampling intervals above that match (``_top``)
_TOP_REACH = 4
#: A whole-range walk's first window holds about this many rows (a scan may stop at its first
#: hits), the next ones twice as many each, up to its ``chunk`` (``_Walk.wanted``)
_FIRST_CHUNK = 25
#: Sample fractions tried in turn until the sample holds ``SAMPLE_ENOUGH`` messages.
SAMPLE_FRACTIONS = (1 / 4096, 1 / 256, 1 / 16, 1.0)
#: A sample of this many tells a read of one correspondent in a hundred from one in ten: where it
#: sees none of a read's matches, their upper estimate (``estimated_matches``) is then below
#: ``PLAIN_MAX`` for a mailbox sampled at 1/16 (up to about 4,000 messages), whose plain query
#: then costs less than any windows would
SAMPLE_ENOUGH = 16

#: The sample that estimates a mailbox's threads (``estimated_threads``) holds this many at least.
THREAD_SAMPLE_ENOUGH = 200
#: A read known to match at most this many documents (a thread, by its summary's messageCount)
#: costs little even where the server reads the whole match: the plain query serves it.
PLAIN_MAX = 1000
#: A read the sample shows matching more than this many (its matches scaled up, without slack) is
#: read in windows even within ``PLAIN_MAX``: its own sampled matches place them, and a page in
#: one or two windows costs less than reading every match (a correspondent in 900 of 1,500
#: messages: 31 ms plain on the embedded server, about 7 ms in two windows)
PLAIN_SEEN = 250
#: A thread whose summary counts at most this many messages is read whole (one flat window):
#: reading a message costs this server about 0.05 ms, a window about 1 ms, so past this a page
#: of a thread costs less in windows placed from its summary (``summary_hint``)
PLAIN_MAX_THREAD = 100
#: The same for the conversation list, in thread summaries: a summary is a tenth of a message
#: document, so reading all of them costs less than the windows that would find a page of them
#: up to about this many (estimated from the sample: ``estimated_threads``).
PLAIN_MAX_THREADS = 4 * PLAIN_MAX
#: Sampled matches added before the sample's count is scaled up to the mailbox (``estimated_matches``):
#: an upper bound (no match in the sample still allows about this many per sampled fraction).
_SAMPLE_SLACK = 4
#: How long a store keeps a mailbox's sample (seconds) unless it writes or deletes mail itself:
#: it is a hint for choosing and sizing windows, never the answer, so mail another writer
#: stores meanwhile changes what a read costs, not the rows it returns.
SAMPLE_TTL = 60.0


def summary_hint(count: int, first_ts: int, last_ts: int, points: int = 64) -> tuple[tuple[int, ...], float]:
    """Where a thread's messages are, from its summary alone (``WindowedRead.hint`` and
    ``hint_fraction``): ``points`` times spread evenly from its first message to its last (both
    exact), each standing for ``count / points`` of them."""
    n = max(min(points, count), 1)
    if n == 1 or last_ts <= first_ts:
        return (last_ts,), 1 / max(count, 1)
    span = last_ts - first_ts
    return tuple(sorted({first_ts + span * i // (n - 1) for i in range(n)})), n / count


def estimated_matches(hits: int, fraction: float) -> float:
    """An upper estimate of the messages a read matches, from ``hits`` of its matches in a
    uniform sample of ``fraction`` of the mailbox (exact for the whole mailbox)."""
    if fraction >= 1:
        return float(hits)
    if fraction <= 0:
        return math.inf
    return (hits + _SAMPLE_SLACK) / fraction


def thread_sample_fraction(sampled: int, fraction: float) -> float:
    """The fraction of the mailbox (a power of two, at most 1) whose sample holds about
    ``THREAD_SAMPLE_ENOUGH`` to twice as many messages, judged from a smaller sample (``sampled``
    messages at ``fraction``): the fractions ``SAMPLE_FRACTIONS`` tries step by 16, so a
    mailbox of 50,000 would be sampled at 3,000 messages, not 200."""
    if fraction >= 1:
        return 1.0
    mailbox = max(sampled, 1) / fraction
    wanted = 1.0
    while wanted / 2 * mailbox >= THREAD_SAMPLE_ENOUGH:
        wanted /= 2
    return wanted


def sample_start(stored: int, enough: int = SAMPLE_ENOUGH) -> float:
    """The first of ``SAMPLE_FRACTIONS`` whose share of ``stored`` messages holds ``enough``
    (the mailbox's count from its extent: an upper one, so a sample that holds fewer grows)."""
    return next((f for f in SAMPLE_FRACTIONS if stored * f >= enough), 1.0)


def plain_serves(hits: int, fraction: float) -> bool:
    """Whether a read of ``hits`` matches in a sample of ``fraction`` of the mailbox is served by
    its plain query: few matches by the upper estimate (``PLAIN_MAX``), and not many by the sample's
    own count (``PLAIN_SEEN``)."""
    if estimated_matches(hits, fraction) > PLAIN_MAX:
        return False
    return fraction >= 1 or fraction <= 0 or hits / fraction <= PLAIN_SEEN


def read_ceiling(sampled: Sequence[int], hits: int, fraction: float, descending: bool = True) -> float:
    """The most rows per second a read can have near the mailbox's newest mail (``descending``;
    else its oldest), by a uniform sample of ``fraction`` of the mailbox (``sampled``: every
    sampled message's ``ts``, sorted) of which ``hits`` may match it: the mailbox's density over
    its newest (oldest) sampled messages, times the share of the sample the read may match (its
    hits with the slack of ``estimated_matches``); 0 where the sample holds fewer than two."""
    near = sampled[-_HINT_NEIGHBOURS:] if descending else sampled[:_HINT_NEIGHBOURS]
    if len(near) < 2 or fraction <= 0:
        return 0.0
    density = (len(near) - 1) / (max(near[-1] - near[0], 1) * fraction)
    return density * min(1.0, (hits + _SAMPLE_SLACK) / len(sampled))


def estimated_threads(sizes: Sequence[int], fraction: float) -> float:
    """An upper estimate of a mailbox's threads from a uniform sample of ``fraction`` of its
    messages, ``sizes`` holding the message count of each sampled message's thread: a thread of
    n messages is sampled n times as often as a thread of one, so each sampled message stands for
    1/n of a thread (exact for the whole mailbox; the slack of ``estimated_matches`` above it).
    The conversation list of a big mailbox of few long threads is then one plain read, not
    windows sized for its messages."""
    share = sum(1 / max(n, 1) for n in sizes)
    if fraction >= 1:
        return share
    if fraction <= 0:
        return math.inf
    return (share + _SAMPLE_SLACK) / fraction


@dataclass(frozen=True)
class Window:
    """One bounded read: ``ts`` in ``[lo, hi)`` (None: open), or ``ts == second`` with the
    tie-breaker in ``[key_lo, key_hi)`` (None: open). ``probe``: where-is-the-mail only."""

    lo: int | None = None
    hi: int | None = None
    second: int | None = None
    key_lo: str | None = None
    key_hi: str | None = None
    probe: bool = False

    def conditions(self, ts_field: str, key_field: str) -> dict[str, Any]:
        """The window as filter conditions (merged over the read's own filter)."""
        if self.second is not None:
            out: dict[str, Any] = {ts_field: self.second}
            key: dict[str, str] = {}
            if self.key_lo is not None:
                key["$gte"] = self.key_lo
            if self.key_hi is not None:
                key["$lt"] = self.key_hi
            if key:
                out[key_field] = key
            return out
        bounds: dict[str, int] = {}
        if self.lo is not None:
            bounds["$gte"] = self.lo  # the server's dialect may restate it (``Dialect.statement``)
        if self.hi is not None:
            bounds["$lt"] = self.hi
        return {ts_field: bounds} if bounds else {}


@dataclass(frozen=True)
class WindowedRead:
    """What ``walk`` needs of a keyset read.

    ``lo``/``hi``: the read's own ``ts`` bounds (``since`` inclusive, ``until`` exclusive).
    ``key_prefix``: what precedes the 64 hex digits of the tie-breaker (a thread ``_id``'s
    ``<mailboxId>:``). ``now``: epoch seconds, where the first page starts looking for mail.
    ``hint``: the sorted ``ts`` of a uniform sample of the mailbox's messages, ``hint_fraction``
    of them (``sample_sizes``): where the mail is, so the walk goes to it past any gap.
    ``newest``/``oldest``: the mailbox's newest and oldest ``ts`` as the store keeps them (None:
    unknown), where a first page starts instead of the clock; bounds of its mail but for mail
    stored since they were read, which the first window (open beyond them) reads too.
    ``ceiling``: the most rows per second the read can have near ``newest`` (ascending:
    ``oldest``) by the sample (the mailbox's density there, times the share of the sampled
    messages the read may match; 0: unknown).
    """

    descending: bool
    now: int
    lo: int | None = None
    hi: int | None = None
    key_prefix: str = ""
    hint: tuple[int, ...] = ()
    hint_fraction: float = 0.0
    newest: int | None = None
    oldest: int | None = None
    ceiling: float = 0.0


def key_between(prefix: str, fraction: float) -> str:
    """The tie-breaker at ``fraction`` (0..1) of the key space, after ``prefix``."""
    value = min(max(int(fraction * _KEY_SPACE), 0), _KEY_SPACE - 1)
    return prefix + format(value, f"0{KEY_DIGITS}x")


def _key_fraction(prefix: str, key: str) -> float | None:
    """Where ``key`` sits in the key space (None: not a prefixed 64-digit hex key)."""
    digits = key[len(prefix) :] if key.startswith(prefix) else ""
    if len(digits) != KEY_DIGITS:
        return None
    try:
        value = int(digits, 16)
    except ValueError:
        return None
    return float(value / _KEY_SPACE)


class _Walk:
    """State shared by the steps of one walk: what is still needed and the density seen."""

    def __init__(self, read: WindowedRead, need: int | None, chunk: int) -> None:
        self.read = read
        self.need = need
        self.chunk = chunk
        self.rows = 0
        self.density: float | None = None  # rows per second near the walk, where known
        self.answers = 0  # answer windows that held rows

    def wanted(self) -> int:
        """Rows the next window is sized for: what is still needed; for a whole-range walk
        (a scan, which may stop at its first hits) a page first, doubling up to ``chunk``."""
        if self.need is None:
            return min(self.chunk, _FIRST_CHUNK << min(self.answers, 16))
        return max(self.need - self.rows, 1)

    def done(self) -> bool:
        return self.need is not None and self.rows >= self.need

    def learn(self, rows: int, seconds: float) -> None:
        """The density of the last window that held mail (mail is denser in some periods)."""
        if rows:
            self.density = rows / seconds

    def width(self, previous: int | None) -> int:
        """Seconds a window needs to hold about ``wanted`` rows at the density seen."""
        if self.density is None:
            return previous or PROBE_WIDTHS[0]
        width = max(math.ceil(self.wanted() * _SLACK / self.density), 1)
        return width if previous is None else min(width, previous * _GROWTH)


def walk(
    read: WindowedRead, after: tuple[int, str] | None, need: int | None, chunk: int = 500
) -> Generator[Window, int, None]:
    """The windows of one read, in its order, starting strictly after ``after``.

    Send each window's row count back. ``need``: rows wanted (the walk stops once the answer
    windows held that many); None walks the whole range in windows of about ``chunk`` rows.
    """
    state = _Walk(read, need, chunk)
    sign = -1 if read.descending else 1
    if after is not None:
        second, key = after
        if _clip(read, second, second + 1) is not None:
            yield from _rest_of_second(state, second, key)
            if state.done():
                return
        edge = second if read.descending else second + 1  # exclusive (desc) / inclusive (asc)
        if read.descending and read.hi is not None:
            edge = min(edge, read.hi)
        if not read.descending and read.lo is not None:
            edge = max(edge, read.lo)
    else:
        edge_or_none = yield from _start(state)
        if edge_or_none is None:
            return
        edge = edge_or_none
    yield from _seconds(state, edge, sign)


def walk_plain(read: WindowedRead, after: tuple[int, str] | None) -> Generator[Window, int, None]:
    """A small read in at most two flat windows: the rest of the cursor's second, then all the
    range beyond it (what the keyset filter's ``$or`` says, which such a server cannot plan)."""
    edge_lo, edge_hi = read.lo, read.hi
    if after is not None:
        second, key = after
        if _clip(read, second, second + 1) is not None:
            yield Window(second=second, key_hi=key) if read.descending else Window(second=second, key_lo=key + "\x00")
        if read.descending:
            edge_hi = second if edge_hi is None else min(edge_hi, second)
        else:
            edge_lo = second + 1 if edge_lo is None else max(edge_lo, second + 1)
    if edge_lo is None or edge_hi is None or edge_lo < edge_hi:
        yield Window(lo=edge_lo, hi=edge_hi)


def _clip(read: WindowedRead, lo: int | None, hi: int | None) -> tuple[int | None, int | None] | None:
    """``[lo, hi)`` within the read's bounds; None when that is empty."""
    if read.lo is not None:
        lo = read.lo if lo is None else max(lo, read.lo)
    if read.hi is not None:
        hi = read.hi if hi is None else min(hi, read.hi)
    if lo is not None and hi is not None and lo >= hi:
        return None
    return lo, hi


def _answer(state: _Walk, lo: int | None, hi: int | None, learn: bool = True) -> Generator[Window, int, bool]:
    """Yield one answer window (clipped); False when it held nothing. ``learn``: its density
    is the mail's (not a window whose width is mostly a gap)."""
    clipped = _clip(state.read, lo, hi)
    if clipped is None:
        return False
    bunch = _bunched_second(state, clipped[0], clipped[1])
    if bunch is not None:
        return (yield from _around_bunch(state, clipped[0], clipped[1], bunch))
    rows = yield Window(lo=clipped[0], hi=clipped[1])
    state.rows += rows
    state.answers += rows > 0
    if learn and clipped[0] is not None and clipped[1] is not None:
        state.learn(rows, clipped[1] - clipped[0])
    return rows > 0


def _bunched_second(state: _Walk, lo: int | None, hi: int | None) -> int | None:
    """The first second (in the walk's order) in ``[lo, hi)`` that the sample shows bunched
    (``_sampled_in``): more rows than a window should read at once (``_BUNCH_ROWS``, and more
    than the page still wants), or None. Whole-second windows cannot split such a second (one
    ingest puts thousands of Date-less messages in it); its key ranges can."""
    read = state.read
    if not read.hint or read.hint_fraction <= 0 or read.hint_fraction >= 1:
        return None
    start = 0 if lo is None else bisect.bisect_left(read.hint, lo)
    end = len(read.hint) if hi is None else bisect.bisect_left(read.hint, hi)
    inside = sorted(set(read.hint[start:end]), reverse=read.descending)
    wanted = max(_BUNCH_ROWS, state.wanted() * _SLACK)
    return next((second for second in inside if _sampled_in(read, second) / read.hint_fraction > wanted), None)


def _sampled_in(read: WindowedRead, second: int) -> int:
    """Sampled messages within a second of ``second``, where two or more are (else 0: one says
    nothing of how many share its second). A bunch spans a few seconds (an ingest's), and its
    sample may hold one message in each."""
    found = bisect.bisect_right(read.hint, second + 1) - bisect.bisect_left(read.hint, second - 1)
    return found if found >= 2 else 0


def _around_bunch(state: _Walk, lo: int | None, hi: int | None, bunch: int) -> Generator[Window, int, bool]:
    """``[lo, hi)`` read as the mail before the bunched second (in the walk's order), the
    second itself in key ranges sized from the sample, then the mail after it."""
    read = state.read
    estimate = _sampled_in(read, bunch) / read.hint_fraction
    first, last = ((bunch + 1, hi), (lo, bunch)) if read.descending else ((lo, bunch), (bunch + 1, hi))
    before = state.rows
    yield from _answer(state, first[0], first[1], learn=False)
    if not state.done():
        yield from _rest_of_second(state, bunch, None, min(1.0, state.wanted() * _SLACK / estimate))
    if not state.done():
        yield from _answer(state, last[0], last[1], learn=False)
    return state.rows > before


def _start(state: _Walk) -> Generator[Window, int, int | None]:
    """The first page. Descending: from the read's own newest mail where the sample shows some
    (``_top``), else from the mailbox's newest (``_unseen``), else (that unknown) from the clock:
    mail dated after ``now`` (+1 day) first, then find where the mail is below. Ascending, the
    mirror: from the read's own oldest sampled mail (``_bottom``), else the mailbox's oldest,
    else (that unknown) the oldest mail probes find (``_locate_oldest``)."""
    read = state.read
    if read.descending:
        top = _top(read, state.wanted())
        if top is None and read.newest is not None:
            yield from _unseen(state, read.newest)
            return None
        if top is None:
            top = read.now + 86_400 if read.hi is None else read.hi
        if read.hi is None or top < read.hi:
            # mail above the top (dated in the future; newer than what the sample saw): first
            yield from _answer(state, top, read.hi, learn=False)
            if state.done():
                return None
        return top
    if read.oldest is not None:
        bottom = _bottom(read)
        if bottom is None:
            yield from _unseen(state, read.oldest)
            return None
        # the mail below the bottom (dated before 1970 too; older than what the sample saw): first
        yield from _answer(state, read.lo, bottom, learn=False)
        return None if state.done() else bottom
    bottom = yield from _locate_oldest(state)
    if bottom is None:
        return None
    return bottom


def _unseen(state: _Walk, end: int) -> Generator[Window, int, None]:
    """A first page the sample shows none of (so its matches are few: about what one sampled
    interval holds at most): one window from the mailbox's newest mail down (descending; from its
    oldest up, ascending: ``end``), open beyond it, sized to hold the page at the most the read
    can have there (``WindowedRead.ceiling``), then the rest of the range in one statement.
    Never probes: they cost a statement each."""
    read = state.read
    if read.ceiling > 0:
        width = max(math.ceil(state.wanted() * _SLACK / read.ceiling), PROBE_WIDTHS[0])
    else:
        width = PROBE_WIDTHS[-1]
    if read.descending:
        edge = end + 1 - width
        yield from _answer(state, edge, read.hi, learn=False)
        if not state.done():
            yield from _answer(state, read.lo, edge, learn=False)
        return
    edge = end + width
    yield from _answer(state, read.lo, edge, learn=False)
    if not state.done():
        yield from _answer(state, edge, read.hi, learn=False)


def _bottom(read: WindowedRead) -> int | None:
    """Where an ascending first page's whole-second windows start when the sample shows the
    read's mail (None: it shows none), the mirror of ``_top``: the first window reads all below
    it. Past the read's oldest sampled match where it stands for few rows, else below it by the
    distance the sample's density there puts ``_TOP_REACH`` sampling intervals in, never below the
    mailbox's oldest mail."""
    if not read.hint or read.hint_fraction <= 0:
        return None
    found = _hinted_density(read, read.hint[0] if read.lo is None else read.lo, 1)
    if found is None:
        return None
    oldest, density = found
    if 1 / read.hint_fraction <= _OPEN_TOP_ROWS:
        return oldest + 1
    if density <= 0:
        return None
    reach = oldest - max(math.ceil(_TOP_REACH / (read.hint_fraction * density)), 1)
    if read.oldest is not None:
        reach = max(reach, read.oldest)
    return reach


def _top(read: WindowedRead, wanted: int) -> int | None:
    """Where a descending first page starts when the sample shows the read's mail (None: it
    shows none, and the walk starts from the mailbox's newest, or where that is unknown from the
    clock): an archive's newest mail may be years old,
    and probes bisecting the years between the clock and it cost a statement each.

    The read's mail above its newest sampled match is about ``1 / hint_fraction`` rows (each
    is sampled with that probability): where that is few (``_OPEN_TOP_ROWS``), the first window
    starts low enough to hold the page (``_covering``: one statement reads it all); else at the
    distance the sample's
    density there puts ``_TOP_REACH`` times that many rows (more mail above is improbable, and
    the open window above the top still reads it), and the walk bisects the span below."""
    if not read.hint or read.hint_fraction <= 0:
        return None
    found = _hinted_density(read, read.hint[-1] + 1 if read.hi is None else read.hi, -1)
    if found is None:
        return None
    newest, density = found
    if 1 / read.hint_fraction <= _OPEN_TOP_ROWS:
        return _covering(read, wanted, newest)
    if _sampled_in(read, newest) and newest >= read.now - 86_400:
        # a bunch at the clock: Date-less mail stamped by a recent ingest, which little mail
        # stands above (what is dated later than it came in); the walk splits the bunch
        return newest + 1 if read.hi is None else min(newest + 1, read.hi)
    if density <= 0:  # one sampled match: no density to place the top by (the clock's start)
        return None
    reach = newest + max(math.ceil(_TOP_REACH / (read.hint_fraction * density)), 1)
    # never above the mailbox's newest mail (or, where that is unknown, the clock's top: past
    # it, only mail dated in the future); the open window above the top reads what is there
    cap = read.now + 86_400 if read.newest is None else read.newest + 1
    if cap > newest:
        reach = min(reach, cap)
    return reach if read.hi is None else min(reach, read.hi)


def _covering(read: WindowedRead, wanted: int, newest: int) -> int:
    """Where a first window that starts at the read's newest sampled match (``newest``) and
    reads all mail above it ends so that it holds about ``wanted`` rows with ``_SLACK`` to
    spare: at the sampled match that many rows down (each sampled match stands for
    ``1 / hint_fraction`` of them), or at ``newest`` where the sample shows fewer. A window that
    holds the page answers it in one statement, where one that ended at ``newest`` left the
    rest of the page to a second."""
    below = [h for h in read.hint if h <= newest and _clip(read, h, h + 1) is not None]
    count = math.ceil(wanted * _SLACK * read.hint_fraction)
    if count <= 1 or len(below) < count:
        return newest
    return below[-count]


def _rest_of_second(
    state: _Walk, second: int, key: str | None, fraction: float = _FIRST_KEY_FRACTION
) -> Generator[Window, int, None]:
    """Rows of ``second`` after ``key`` (None: all of it): a small key range first (``fraction``
    of the key space: bunched seconds hold thousands), then ranges sized from what it held."""
    read = state.read
    start = (1.0 if read.descending else 0.0) if key is None else _key_fraction(read.key_prefix, key)
    if start is None:  # not a hex key: the rest of the second in one window
        assert key is not None
        rows = yield (
            Window(second=second, key_hi=key) if read.descending else Window(second=second, key_lo=key + "\x00")
        )
        state.rows += rows
        return
    position = start  # fraction: the key bound still to pass
    first = True
    while not state.done():
        remaining = position if read.descending else 1.0 - position
        if remaining <= 0:
            return
        step = min(fraction, remaining)
        whole = step >= remaining
        if read.descending:
            window = Window(
                second=second,
                key_lo=None if whole else key_between(read.key_prefix, position - step),
                key_hi=key if first else key_between(read.key_prefix, position),
            )
            position -= step
        else:
            window = Window(
                second=second,
                key_lo=(None if key is None else key + "\x00") if first else key_between(read.key_prefix, position),
                key_hi=None if whole else key_between(read.key_prefix, position + step),
            )
            position += step
        rows = yield window
        state.rows += rows
        first = False
        if whole:
            return
        if rows == 0:
            fraction = remaining  # an ordinary second: read the rest of it at once
        else:
            per_fraction = rows / step
            fraction = max(state.wanted() * _SLACK / per_fraction, step)


def _seconds(state: _Walk, edge: int, sign: int) -> Generator[Window, int, None]:
    """Whole-second windows from ``edge`` in the read's direction until the range is exhausted."""
    read = state.read
    width = _hinted_width(state, edge, sign)
    # a first window sized from the sample's density at the edge: mail that goes on past the
    # edge (a page after a cursor) is read at once; one that finds a gap sends the walk to probes
    empties = 0 if width is None else _EMPTY_DOUBLINGS
    while not state.done():
        if read.descending and read.lo is not None and edge <= read.lo:
            return
        if not read.descending and read.hi is not None and edge >= read.hi:
            return
        if width is None or empties > _EMPTY_DOUBLINGS:
            found = yield from _locate(state, edge, sign)
            if found is None:
                # no probe found mail: one open window takes whatever is left
                if read.descending:
                    yield from _answer(state, None, edge)
                else:
                    yield from _answer(state, edge, None)
                return
            far, state.density = found
            lo, hi = (far, edge) if read.descending else (edge, far)
            yield from _answer(state, lo, hi, learn=False)
            edge = far
            width = state.width(None)
            empties = 0
            continue
        lo, hi = (edge - width, edge) if read.descending else (edge, edge + width)
        held = yield from _answer(state, lo, hi)
        edge = lo if read.descending else hi
        if held:
            empties = 0
            width = state.width(width)
        else:
            empties += 1
            width *= 2


def _probe(read: WindowedRead, lo: int, width: int) -> Window | None:
    clipped = _clip(read, lo, lo + width)
    if clipped is None:
        return None
    return Window(lo=clipped[0], hi=clipped[1], probe=True)


def _locate(state: _Walk, edge: int, sign: int) -> Generator[Window, int, tuple[int, float] | None]:
    """Where the next mail beyond ``edge`` is: ``(far, density)``, where the window from ``edge``
    to ``far`` holds the nearest mail found (and little beyond it); None when no probe found any.

    The nearest sampled message beyond ``edge`` (``hint``) where there is one; else probes of
    ``width`` seconds at ``width``, ``2 width``, ``4 width``... from ``edge``. Then bisection
    between the mail found and ``edge``.
    """
    read = state.read
    hinted = _hinted(read, edge, sign)
    if hinted is not None:
        mail, width = hinted
        return (yield from _bisect(state, edge, mail - width // 2, width, _HINT_PROBE_ROWS, sign))
    if read.hint:
        return None  # the sample holds nothing beyond: what is left is about 1/fraction messages
    for width in PROBE_WIDTHS:
        near = edge  # the empty side: nothing found between edge and here
        distance = width
        while distance <= _PROBE_REACH:
            start = edge - distance if sign < 0 else edge + distance - width
            if sign < 0 and read.lo is not None and start + width <= read.lo:
                break
            if sign > 0 and read.hi is not None and start >= read.hi:
                break
            probe = _probe(read, start, width)
            if probe is None:
                break
            rows = yield probe
            if rows:
                return (yield from _bisect(state, near, start, width, rows, sign))
            near = start if sign < 0 else start + width
            distance *= 2
    return None


def _hinted(read: WindowedRead, edge: int, sign: int) -> tuple[int, int] | None:
    """The nearest sampled ``ts`` beyond ``edge`` in the walk's direction (within the read's
    bounds), and a probe width that holds a few messages at the sample's density there."""
    found = _hinted_density(read, edge, sign)
    if found is None:
        return None
    mail, density = found
    width = PROBE_WIDTHS[0] if density <= 0 else min(max(math.ceil(_HINT_PROBE_ROWS / density), 1), 86_400)
    return mail, width


def _hinted_density(read: WindowedRead, edge: int, sign: int) -> tuple[int, float] | None:
    """The nearest sampled ``ts`` beyond ``edge`` and the read's density there (rows per second;
    0 where the sample holds one message there)."""
    if not read.hint or read.hint_fraction <= 0:
        return None
    at = bisect.bisect_left(read.hint, edge)
    beyond = list(reversed(read.hint[:at])) if sign < 0 else list(read.hint[at:])
    beyond = [h for h in beyond if _clip(read, h, h + 1) is not None]
    if not beyond:
        return None
    near = beyond[:_HINT_NEIGHBOURS]
    span = max(abs(near[-1] - near[0]), 1)
    density = max(len(near) - 1, 1) / (span * read.hint_fraction) if len(near) > 1 else 0.0
    return near[0], density


def _hinted_width(state: _Walk, edge: int, sign: int) -> int | None:
    """A first window's width beyond ``edge``: the rows still wanted at the sample's density
    near the edge; None without a density there (no sampled mail beyond the edge, or a single
    point) or where the sampled mail stands beyond a gap."""
    found = _hinted_density(state.read, edge, sign)
    if found is None or found[1] <= 0:
        return None
    mail, density = found
    if abs(mail - edge) * density * state.read.hint_fraction > _HINT_GAP_SAMPLES:
        return None  # farther than sampled mail stands apart (1/fraction rows): a gap, probably
    return max(math.ceil(state.wanted() * _SLACK / density), 1)


def _bisect(
    state: _Walk, near: int, found: int, width: int, rows: int, sign: int
) -> Generator[Window, int, tuple[int, float]]:
    """Narrow the unknown span between ``near`` (nothing found up to it) and the probe at ``found``
    that found ``rows``; returns the far end of the window to read and the density seen."""
    read = state.read
    density = rows / width
    for _ in range(_BISECT_STEPS):
        span = near - (found + width) if sign < 0 else found - near
        if span <= _BISECT_SPAN * width:
            break
        middle = (found + width + near) // 2 if sign < 0 else (near + found) // 2
        probe = _probe(read, middle - width // 2, width)
        if probe is None:
            break
        held = yield probe
        if held:
            found = middle - width // 2
            density = held / width
        else:
            near = middle - width // 2 if sign < 0 else middle + width - width // 2
    return (found if sign < 0 else found + width), density


def _locate_oldest(state: _Walk) -> Generator[Window, int, int | None]:
    """An ascending first page: mail dated before 1970 first, then the oldest mail found by
    probes reaching back from ``now`` (farthest first, then bisection); returns the edge the
    whole-second windows go on from."""
    read = state.read
    yield from _answer(state, None, 0)  # before 1970 (a Date-less ts of 0 is at 0: next window)
    if state.done():
        return None
    low = 0 if read.lo is None else max(read.lo, 0)
    hinted = _hinted(read, low, 1)
    if hinted is not None:
        mail, width = hinted
        far, state.density = yield from _bisect(state, low, mail - width // 2, width, _HINT_PROBE_ROWS, 1)
        yield from _answer(state, low, far, learn=False)
        return far
    top = read.now + 86_400 if read.newest is None else read.newest + 1
    for width in PROBE_WIDTHS:
        starts: list[int] = []
        distance = width
        while top - distance > low and distance <= _PROBE_REACH:
            starts.append(top - distance)
            distance *= 2
        near = low
        for start in reversed(starts):  # farthest back first
            probe = _probe(read, start, width)
            if probe is None:
                continue
            rows = yield probe
            if rows:
                far, state.density = yield from _bisect(state, near, start, width, rows, 1)
                yield from _answer(state, low, far, learn=False)
                return far
            near = start + width
    return low


def merge_filter(base: Mapping[str, Any], window: Window, ts_field: str, key_field: str) -> dict[str, Any]:
    """The read's flat filter with the window's conditions in place of its own ``ts`` bounds."""
    merged = {k: v for k, v in base.items() if k != ts_field}
    merged.update(window.conditions(ts_field, key_field))
    return merged
