"""``Date`` header parsing (AECS-1 §6).

The result is always ``YYYY-MM-DDTHH:MM:SSZ`` plus integer epoch seconds, or ``(None, None)``
when the value is absent or cannot be read. Nothing is guessed and nothing depends on the
machine's time zone or locale:

* RFC 5322 dates (``[Day,] DD Mon YYYY HH:MM[:SS] zone``) and the usual obsolete forms
  (two-digit years, named zones, comments such as ``(PDT)``, asctime order
  ``Mon Jan  1 10:00:00 2001``) are accepted.
* A value with no zone, with ``-0000``, with a military letter or with an unknown named zone
  is read as UTC (RFC 5322 §4.3 reads unknown zones as ``-0000``).
* Two-digit years follow RFC 5322 §4.3: 00-49 are 2000-2049, 50-99 are 1950-1999; three-digit
  years add 1900.
* Comments and whitespace around the time's colons are dropped (``09(comment): 55 : 06``).
* A three-digit numeric zone (``-600``) lacks its leading zero: ``-0600``.
* A 12-hour time with ``AM``/``PM`` (``06:09:22 PM EDT``) is read as such (12 AM is 00,
  12 PM is 12); an hour outside 1-12 is a 24-hour time and the AM/PM is ignored.
* ISO 8601 values (``2026-03-10T12:00:00Z``, ``+01:00``, fractional seconds, a space instead
  of ``T``, a bare ``YYYY-MM-DD`` meaning midnight UTC) are accepted too; fractions are
  floored away.
* Out-of-range fields (month 13, 31 February, hour 24, minute 60, an offset minute >= 60,
  a result outside years 1-9999) make the value unparseable. Second 60 (a leap second) is
  accepted and rolls into the next minute, as epoch arithmetic does.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

__all__ = ["NormalizedDate", "format_utc", "parse_date"]


class NormalizedDate(NamedTuple):
    """``metadata.date`` and ``metadata.timestamp``; both ``None`` or both set."""

    date: str | None
    timestamp: int | None


_NONE = NormalizedDate(None, None)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_TS = calendar.timegm((1, 1, 1, 0, 0, 0))
_MAX_TS = calendar.timegm((9999, 12, 31, 23, 59, 59))

_MONTHS = {
    name: index
    for index, name in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], start=1
    )
}
_FULL_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_DAYS = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"}
# RFC 5322 §4.3 obsolete zones with a known meaning; everything else alphabetic is -0000.
_NAMED_ZONES = {
    "ut": 0, "utc": 0, "gmt": 0, "z": 0,
    "edt": -4 * 60, "est": -5 * 60, "cdt": -5 * 60, "cst": -6 * 60,
    "mdt": -6 * 60, "mst": -7 * 60, "pdt": -7 * 60, "pst": -8 * 60,
}  # fmt: skip

_ISO_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?\s*([Zz]|[+-]\d{2}(?::?\d{2})?)?)?",
    re.ASCII,  # dates are ASCII: no other script's digits, no superscripts
)
_COMMENT_RE = re.compile(r"\([^()]*\)")
_TIME_RE = re.compile(r"(\d{1,2}):(\d{1,2})(?::(\d{1,2}))?(?:\.\d+)?([AaPp]\.?[Mm]\.?)?", re.ASCII)
_OFFSET_RE = re.compile(r"([+-])(\d{3,4}|\d{2}:\d{2}|\d{1,2})", re.ASCII)
_COLON_SPACE_RE = re.compile(r"\s*:\s*")
_SPACED_COLON_RE = re.compile(r"\s:|:\s")
_MERIDIEMS = {"am": 0, "a.m": 0, "pm": 12, "p.m": 12}
_TOKEN_SPLIT_RE = re.compile(r"[\s,]+")


def format_utc(timestamp: int) -> str:
    """Epoch seconds -> ``YYYY-MM-DDTHH:MM:SSZ`` (works before 1970 too)."""
    if type(timestamp) is not int or not _MIN_TS <= timestamp <= _MAX_TS:
        moment = _EPOCH + timedelta(seconds=timestamp)  # raises where datetime cannot hold it
        return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment:%H:%M:%S}Z"
    # the proleptic Gregorian date of a day number, by integer arithmetic (H. Hinnant's
    # civil_from_days): what datetime computes, without building one
    days, seconds = divmod(timestamp, 86400)
    shifted = days + 719468  # days since 0000-03-01
    era = shifted // 146097
    day_of_era = shifted - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153  # March is 0
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    year = year_of_era + era * 400 + (month <= 2)
    hour, rest = divmod(seconds, 3600)
    minute, second = divmod(rest, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"


def _result(
    year: int, month: int, day: int, hour: int, minute: int, second: int, offset_minutes: int
) -> NormalizedDate:
    if not (1 <= month <= 12 and 1 <= year <= 9999):
        return _NONE
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return _NONE
    if not (0 <= hour <= 23 and 0 <= minute <= 59 and 0 <= second <= 60):
        return _NONE
    timestamp = calendar.timegm((year, month, day, hour, minute, second)) - offset_minutes * 60
    if not _MIN_TS <= timestamp <= _MAX_TS:
        return _NONE
    return NormalizedDate(format_utc(timestamp), timestamp)


def _parse_iso(value: str) -> NormalizedDate | None:
    match = _ISO_RE.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second, zone = match.groups()
    offset = 0
    if zone and zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        zone_minutes = int(digits[2:4] or "0")
        if zone_minutes >= 60:
            return _NONE
        offset = sign * (int(digits[:2]) * 60 + zone_minutes)
    return _result(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), offset)


def _digits(token: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts superscripts, which ``int`` refuses."""
    return token.isascii() and token.isdigit()


def _year(token: str) -> int | None:
    if not _digits(token) or not 2 <= len(token) <= 4:
        return None
    year = int(token)
    if len(token) == 2:
        return year + (2000 if year < 50 else 1900)
    if len(token) == 3:
        return year + 1900
    return year


def _parse_rfc5322(value: str) -> NormalizedDate:
    text = value
    for _ in range(4):  # nested comments are rare; four levels is plenty
        stripped = _COMMENT_RE.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    if _SPACED_COLON_RE.search(text):  # ``09 : 55 : 06`` (CFWS around the colons) is a time
        text = _COLON_SPACE_RE.sub(":", text)
    tokens = [token for token in _TOKEN_SPLIT_RE.split(text.strip()) if token]
    day: int | None = None
    month: int | None = None
    year: int | None = None
    clock: tuple[int, int, int] | None = None
    offset: int | None = None
    meridiem: int | None = None
    for token in tokens:
        lower = token.lower().rstrip(".")
        if clock is None:
            time_match = _TIME_RE.fullmatch(token)
            if time_match is not None:
                clock = (int(time_match[1]), int(time_match[2]), int(time_match[3] or 0))
                if time_match[4]:
                    meridiem = _MERIDIEMS[time_match[4].lower().rstrip(".")]
                continue
        if clock is not None and meridiem is None and offset is None and lower in _MERIDIEMS:
            meridiem = _MERIDIEMS[lower]  # a 12-hour time: ``06:09:22 PM EDT``
            continue
        if (
            month is None
            and lower[:3] in _MONTHS
            and lower.isalpha()
            and any(full.startswith(lower) for full in _FULL_MONTHS)
        ):
            month = _MONTHS[lower[:3]]
            continue
        if lower[:3] in _DAYS and lower.isalpha():
            continue
        if _digits(token):
            if day is None and len(token) <= 2 and year is None:
                day = int(token)
                continue
            if year is None:
                year = _year(token)
                if year is None:
                    return _NONE
                continue
            if day is None and len(token) <= 2:
                day = int(token)
                continue
            return _NONE
        if clock is not None and offset is None:
            offset_match = _OFFSET_RE.fullmatch(token)
            if offset_match is not None:
                digits = offset_match[2].replace(":", "")
                if len(digits) == 3:
                    digits = "0" + digits  # ``-600``: a zone written without its leading zero
                if len(digits) <= 2:
                    hours, minutes = int(digits), 0
                else:
                    hours, minutes = int(digits[:2]), int(digits[2:])
                if minutes >= 60:
                    return _NONE
                offset = (1 if offset_match[1] == "+" else -1) * (hours * 60 + minutes)
                continue
            if token.isalpha():
                # Named zone: the known obsolete ones have an offset; any other (military
                # letters, CET, MEZ, ...) means "-0000", i.e. UTC with no local-zone claim.
                offset = _NAMED_ZONES.get(lower, 0)
                continue
        if clock is not None and offset is not None:
            continue  # trailing junk after the zone (a second zone, a stray word)
        return _NONE
    if day is None or month is None or year is None or clock is None:
        return _NONE
    hour = clock[0]
    if meridiem is not None and 1 <= hour <= 12:
        hour = hour % 12 + meridiem  # 12 AM is 00, 12 PM is 12
    return _result(year, month, day, hour, clock[1], clock[2], offset or 0)


def parse_date(value: str | None) -> NormalizedDate:
    """Normalize a ``Date`` header value (RFC 5322 or ISO 8601) per AECS-1 §6.

    Returns ``NormalizedDate(None, None)`` when ``value`` is ``None``, blank or unparseable.
    """
    if value is None:
        return _NONE
    text = value.strip()
    if not text or len(text) > 200:
        return _NONE
    common = _COMMON_RE.fullmatch(text)
    if common is not None:
        day, month, year, hour, minute, second, sign, zone_hours, zone_minutes = common.groups()
        if int(zone_minutes) >= 60:
            return _NONE
        offset = (1 if sign == "+" else -1) * (int(zone_hours) * 60 + int(zone_minutes))
        return _result(int(year), _MONTHS[month.lower()], int(day), int(hour), int(minute), int(second), offset)
    iso = _parse_iso(text)
    if iso is not None:
        return iso
    return _parse_rfc5322(text)


# The form nearly every mailer writes (``Mon, 1 Jul 1996 14:55:48 -0700 (PDT)``): read at once,
# as ``_parse_rfc5322`` reads it token by token.
_COMMON_RE = re.compile(
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ?)?(\d{1,2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"(\d{4}) (\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})(?: \([A-Za-z]{1,5}\))?",
    re.ASCII,
)


_RECEIVED = re.compile(rb"received[ \t]*:", re.IGNORECASE)
_HEADER_SCAN = 256 * 1024


def received_timestamp(raw: bytes) -> int | None:
    """The date of the newest ``Received:`` header (the topmost: each relay adds its own above
    the others), as epoch seconds; None when there is none or its date does not parse.

    A Received field ends with ``; <date-time>`` (RFC 5321 §4.4); that date is read as a Date
    header is. Only the header block is looked at (up to its first empty line).
    """
    head = raw[:_HEADER_SCAN]
    lines = head.splitlines()
    for number, line in enumerate(lines):
        if not line.strip():
            return None  # the end of the header: no Received field
        if not _RECEIVED.match(line):
            continue
        field = [line.split(b":", 1)[1]]
        for more in lines[number + 1 :]:
            if more[:1] not in (b" ", b"\t"):
                break
            field.append(more)
        value = b" ".join(part.strip() for part in field)
        if b";" not in value:
            return None
        text = value.rsplit(b";", 1)[1].decode("ascii", "replace")
        return parse_date(text).timestamp
    return None
