"""Bytes -> text for mail: declared charsets, their real-world aliases, and detection.

Rules (deterministic; no locale, no guessing beyond what is written here):

1. A declared charset is resolved through the aliases mail clients and browsers use
   (``iso-8859-1``/``us-ascii`` read as windows-1252, ``gb2312`` as GB18030, ``shift_jis`` as
   cp932, ``ks_c_5601-1987`` as cp949, ...) and decoded strictly.
2. When that fails, or no usable charset is declared, valid UTF-8 wins.
3. Otherwise ``charset-normalizer`` picks an encoding (only for input over a few bytes);
   failing that, windows-1252 with latin-1 for its five undefined bytes, which never fails.
4. A declared charset that decodes with errors is used with U+FFFD replacement only after
   the steps above found nothing better.

Two refinements for what real mail does:

* *Almost valid UTF-8* (a truncated or damaged character among correct ones) is read as
  UTF-8 with U+FFFD for each damaged sequence, not as windows-1252, when the valid
  multi-byte sequences are at least :data:`UTF8_VALID_PER_ERROR` times the damaged ones.
  Text really written in windows-1252 or latin-1 almost never holds even one valid
  multi-byte UTF-8 sequence (that takes a letter from ``À``-``ô`` followed by one or more
  of ``€``-``¿``), so two per error is a safe margin. This applies where UTF-8 is tried:
  declared UTF-8, declared US-ASCII, and an undeclared or unusable charset; a declared
  single-byte charset such as ISO-8859-1 still wins.
* ``ISO-2022-JP`` is decoded as Microsoft's CP50220 and the WHATWG decoder do: the strict
  codec first, then ``iso2022_jp_2``, then a lenient reader that takes the common vendor
  extensions in JIS X 0208 mode (NEC row 13 such as ``№`` and ``①``, the NEC-selected IBM
  rows 89-92) through their Shift_JIS (cp932) code points, so the raw escape sequences
  never reach the text.

Every fallback appends a short note to ``defects`` so nothing is silently replaced.
"""

from __future__ import annotations

import codecs
import re

from charset_normalizer import from_bytes

__all__ = ["UTF8_VALID_PER_ERROR", "decode_bytes", "resolve_charset"]

#: Almost valid UTF-8 is UTF-8 when it holds at least this many valid multi-byte
#: sequences per damaged one (see the module docstring).
UTF8_VALID_PER_ERROR = 2

_ALIASES = {
    "us-ascii": "cp1252", "ascii": "cp1252", "ansi_x3.4-1968": "cp1252", "iso646-us": "cp1252",
    "iso-8859-1": "cp1252", "iso8859-1": "cp1252", "iso_8859-1": "cp1252", "latin1": "cp1252",
    "latin-1": "cp1252", "l1": "cp1252", "iso-ir-100": "cp1252", "cp819": "cp1252",
    "x-user-defined": "latin-1",
    "gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "gb_2312-80": "gb18030",
    "csgb2312": "gb18030", "euc-cn": "gb18030", "chinese": "gb18030", "cp936": "gb18030",
    "shift_jis": "cp932", "shift-jis": "cp932", "sjis": "cp932", "x-sjis": "cp932",
    "ms_kanji": "cp932", "csshiftjis": "cp932", "windows-31j": "cp932",
    "euc-kr": "cp949", "ks_c_5601-1987": "cp949", "ks_c_5601": "cp949", "ksc5601": "cp949",
    "x-windows-949": "cp949", "csksc56011987": "cp949",
    "big5": "big5hkscs", "x-x-big5": "big5hkscs", "cn-big5": "big5hkscs",
    "iso-8859-8-i": "iso-8859-8", "iso-8859-6-i": "iso-8859-6", "iso-8859-6-e": "iso-8859-6",
    "iso-8859-8-e": "iso-8859-8", "iso-8859-9": "cp1254", "latin5": "cp1254",
    "iso-8859-11": "cp874", "tis-620": "cp874", "windows-874": "cp874",
    "x-mac-roman": "mac_roman", "macintosh": "mac_roman", "x-mac-cyrillic": "mac_cyrillic",
    "unicode-1-1-utf-7": "utf-7", "utf7": "utf-7", "utf8": "utf-8", "unicode-1-1-utf-8": "utf-8",
    "x-unicode20utf8": "utf-8", "unicode": "utf-16",
    "cp50220": "iso2022_jp", "cp50221": "iso2022_jp", "cp50222": "iso2022_jp",
    "csiso2022jp": "iso2022_jp", "iso-2022-jp-ms": "iso2022_jp", "x-iso-2022-jp": "iso2022_jp",
}  # fmt: skip
# Python codecs that are not text encodings, or that nobody means in mail.
_REFUSED = {"undefined", "idna", "punycode", "raw_unicode_escape", "unicode_escape", "mbcs", "oem"}
_CACHE: dict[str, str | None] = {}


def resolve_charset(label: str | None) -> str | None:
    """A Python codec name for a MIME charset label, or ``None`` when unknown or unusable."""
    if not label:
        return None
    key = label.strip().strip("\"'").strip().lower()
    if key in _CACHE:
        return _CACHE[key]
    name = key.split("*", 1)[0]  # RFC 2231 language suffix
    name = _ALIASES.get(name, name)
    resolved: str | None
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError, TypeError):
        resolved = None
    else:
        text_encoding = getattr(info, "_is_text_encoding", True)
        resolved = None if info.name in _REFUSED or not text_encoding else info.name
    if len(_CACHE) < 1024:
        _CACHE[key] = resolved
    return resolved


def _latin1_fallback(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return error.object[error.start : error.end].decode("latin-1"), error.end


codecs.register_error("aecs-latin1-fallback", _latin1_fallback)


def _cp1252_or_latin1(data: bytes) -> str:
    """windows-1252; its five undefined bytes map to the C1 controls, as latin-1 does."""
    return data.decode("cp1252", errors="aecs-latin1-fallback")


def _almost_utf8(data: bytes) -> str | None:
    """``data`` as UTF-8 with U+FFFD for damaged sequences, when it is almost valid UTF-8."""
    text = data.decode("utf-8", errors="replace")
    replaced = text.count("\ufffd")
    damaged = replaced - data.count(b"\xef\xbf\xbd")
    if damaged <= 0:
        return text
    multi_byte = len(text) - len(text.encode("ascii", errors="ignore")) - replaced
    return text if multi_byte >= UTF8_VALID_PER_ERROR * damaged else None


_ISO2022JP_ESCAPE_RE = re.compile(rb"\x1b(\$[@B]|\([BJI])")


def _jis0208_pair(first: int, second: int) -> str:
    """One JIS X 0208 character; vendor extensions through their cp932 code point."""
    try:
        return bytes((first | 0x80, second | 0x80)).decode("euc_jp")
    except UnicodeDecodeError:
        pass
    lead = (first + 1) // 2 + (0x70 if first <= 0x5E else 0xB0)
    trail = second + (0x1F + (second >= 0x60) if first & 1 else 0x7E)
    try:
        return bytes((lead, trail)).decode("cp932")
    except UnicodeDecodeError:
        return "\ufffd"


def _iso2022jp_lenient(data: bytes) -> str:
    """ISO-2022-JP the way CP50220/WHATWG read it; never raises."""
    out: list[str] = []
    mode = b"(B"
    position = 0
    for match in [*_ISO2022JP_ESCAPE_RE.finditer(data), None]:
        end = match.start() if match is not None else len(data)
        segment = data[position:end]
        if mode in (b"$@", b"$B"):
            index = 0
            while index < len(segment):
                first = segment[index]
                if first in (0x0A, 0x0D):
                    out.append(chr(first))
                    index += 1
                elif 0x21 <= first <= 0x7E and index + 1 < len(segment) and 0x21 <= segment[index + 1] <= 0x7E:
                    out.append(_jis0208_pair(first, segment[index + 1]))
                    index += 2
                else:
                    out.append("\ufffd")
                    index += 1
        elif mode == b"(I":
            out.extend(chr(0xFF61 + byte - 0x21) if 0x21 <= byte <= 0x5F else "\ufffd" for byte in segment)
        else:
            text = segment.replace(b"\x1b", b"\x00").decode("ascii", errors="replace").replace("\x00", "\ufffd")
            if mode == b"(J":
                text = text.replace("\\", "\u00a5").replace("~", "\u203e")
            out.append(text)
        if match is None:
            break
        mode = match.group(1)
        position = match.end()
    return "".join(out)


def _decode_iso2022jp(data: bytes, defects: list[str] | None, where: str) -> str:
    for codec in ("iso2022_jp", "iso2022_jp_2"):
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        if "\x1b" not in text:  # the codecs pass an unknown escape sequence through
            return text
        break
    if defects is not None:
        defects.append(f"{where}: ISO-2022-JP with vendor extensions or invalid sequences")
    return _iso2022jp_lenient(data)


_HIGH_BYTES = bytes(range(0x80, 0x100))
_ASCII_LETTERS = bytes(range(0x41, 0x5B)) + bytes(range(0x61, 0x7B))


def _mostly_non_latin(data: bytes) -> bool:
    """True when 8-bit bytes dominate the letters, as in Cyrillic, Greek or CJK text.

    Western European text in windows-1252 has a few accented letters among ASCII ones;
    statistical detection is unreliable there (it picks Baltic or CJK code pages), so it is
    only asked when most letters are 8-bit.
    """
    sample = data[:65536]
    high = len(sample) - len(sample.translate(None, _HIGH_BYTES))
    ascii_letters = len(sample) - len(sample.translate(None, _ASCII_LETTERS))
    return high >= 16 and high > ascii_letters


def _detect(data: bytes) -> str | None:
    if len(data) < 16 or not _mostly_non_latin(data):
        return None
    try:
        best = from_bytes(data[:65536]).best()
    except Exception:
        return None
    if best is None:
        return None
    encoding = resolve_charset(best.encoding)
    if encoding is None:
        return None
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def decode_bytes(data: bytes, charset: str | None, defects: list[str] | None = None, *, where: str = "body") -> str:
    """Decode ``data`` declared as ``charset`` (may be ``None``); never raises."""
    if not data:
        return ""
    encoding = resolve_charset(charset)
    if encoding is not None:
        if encoding == "cp1252":
            if data.isascii():
                return data.decode("ascii")
            declared_ascii = (charset or "").strip().lower() in ("us-ascii", "ascii", "ansi_x3.4-1968")
            if declared_ascii:
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
                almost = _almost_utf8(data)
                if almost is not None:
                    if defects is not None:
                        defects.append(f"{where}: invalid utf-8 bytes replaced")
                    return almost
            return _cp1252_or_latin1(data)
        if encoding == "iso2022_jp":
            return _decode_iso2022jp(data, defects, where)
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, UnicodeError, LookupError, ValueError, TypeError):
            pass
    elif data.isascii():
        if charset and defects is not None:
            defects.append(f"{where}: unknown charset {charset[:40]!r}")
        return data.decode("ascii")
    if data.isascii():
        return data.decode("ascii")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        if charset and defects is not None:
            defects.append(f"{where}: charset {charset[:40]!r} unusable, read as utf-8")
        return text
    almost = _almost_utf8(data)
    if almost is not None:
        if defects is not None:
            defects.append(f"{where}: invalid utf-8 bytes replaced")
        return almost
    detected = _detect(data)
    if detected is not None:
        if defects is not None:
            defects.append(f"{where}: charset {(charset or 'undeclared')[:40]!r} unusable, detected")
        return detected
    if encoding is not None:
        if defects is not None:
            defects.append(f"{where}: invalid {charset[:40] if charset else ''!r} bytes replaced")
        try:
            return data.decode(encoding, errors="replace")
        except (UnicodeError, LookupError, ValueError, TypeError):
            pass
    if defects is not None:
        defects.append(f"{where}: charset {(charset or 'undeclared')[:40]!r} unusable, read as windows-1252")
    return _cp1252_or_latin1(data)
