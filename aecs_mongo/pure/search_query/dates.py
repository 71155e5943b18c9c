"""``date:`` bounds: which texts are dates, and the UTC period each names.

A bound is ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, a count back from today (``30d``, ``2w``,
``6m``, ``1y``), ``today`` or ``yesterday``; it names a whole UTC period, so ``date:A..B``
runs from A's first second to B's last. Relative bounds are counted from the caller's ``now``,
which keeps this module pure and its answers reproducible.
"""

from __future__ import annotations

import datetime as _dt
import re

from .tree import Date

__all__ = ["bound_error", "date_range"]

_ABSOLUTE = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?", re.ASCII)
_RELATIVE = re.compile(r"(\d{1,5})([dwmy])", re.ASCII)


def bound_error(bound: str) -> str | None:
    """Why ``bound`` is not a date bound, or None."""
    lowered = bound.lower()
    if lowered in ("today", "yesterday") or _RELATIVE.fullmatch(lowered):
        return None
    m = _ABSOLUTE.fullmatch(bound)
    if not m:
        return f"{bound!r} is not a date (YYYY, YYYY-MM, YYYY-MM-DD, 30d, 2w, 6m, 1y, today)"
    year, month, day = int(m.group(1)), m.group(2), m.group(3)
    try:
        _dt.date(max(year, 1), int(month or 1), int(day or 1))
    except ValueError:
        return f"{bound!r} is not a date"
    return None


def _period(bound: str, today: _dt.date) -> tuple[_dt.date, _dt.date]:
    """The first day of the UTC period a bound names, and the first day after it."""
    if bound == "today":
        return today, today + _dt.timedelta(days=1)
    if bound == "yesterday":
        return today - _dt.timedelta(days=1), today
    rel = _RELATIVE.fullmatch(bound)
    if rel:
        n, unit = int(rel.group(1)), rel.group(2)
        if unit in "dw":
            day = today - _dt.timedelta(days=n * (7 if unit == "w" else 1))
        else:
            months = n * (12 if unit == "y" else 1)
            year, month = divmod(today.year * 12 + today.month - 1 - months, 12)
            year = max(year, 1)
            month += 1
            day = _dt.date(year, month, min(today.day, _month_days(year, month)))
        return day, day + _dt.timedelta(days=1)
    m = _ABSOLUTE.fullmatch(bound)
    assert m is not None  # checked by the parser
    year = max(int(m.group(1)), 1)
    if m.group(3):
        first = _dt.date(year, int(m.group(2)), int(m.group(3)))
        return first, first + _dt.timedelta(days=1)
    if m.group(2):
        month = int(m.group(2))
        first = _dt.date(year, month, 1)
        return first, first + _dt.timedelta(days=_month_days(year, month))
    return _dt.date(year, 1, 1), (_dt.date(year + 1, 1, 1) if year < 9999 else _dt.date(9999, 12, 31))


def _month_days(year: int, month: int) -> int:
    following = _dt.date(year + (month == 12), month % 12 + 1, 1) if year < 9999 or month < 12 else None
    return 31 if following is None else (following - _dt.date(year, month, 1)).days


def _epoch(day: _dt.date) -> int:
    return int(_dt.datetime(day.year, day.month, day.day, tzinfo=_dt.UTC).timestamp())


def date_range(node: Date, now: _dt.datetime) -> tuple[int | None, int | None]:
    """``[start, end)`` in epoch seconds (either open: None) of a ``date:`` leaf, relative bounds
    counted back from ``now``'s UTC day. A range that ends before it starts matches nothing."""
    today = now.astimezone(_dt.UTC).date()
    start = None if node.start is None else _epoch(_period(node.start, today)[0])
    end = None if node.end is None else _epoch(_period(node.end, today)[1])
    return start, end
