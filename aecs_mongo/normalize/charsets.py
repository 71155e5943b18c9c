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

Every fallback appends a short note to ``defects`` so nothing is silently replaced.
"""

from __future__ import annotations

import codecs

from charset_normalizer import from_bytes

__all__ = ["decode_bytes", "resolve_charset"]

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


def _mostly_non_latin(data: bytes) -> bool:
    """True when 8-bit bytes dominate the letters, as in Cyrillic, Greek or CJK text.

    Western European text in windows-1252 has a few accented letters among ASCII ones;
    statistical detection is unreliable there (it picks Baltic or CJK code pages), so it is
    only asked when most letters are 8-bit.
    """
    sample = data[:65536]
    high = sum(1 for byte in sample if byte >= 0x80)
    ascii_letters = sum(1 for byte in sample if 0x41 <= byte <= 0x5A or 0x61 <= byte <= 0x7A)
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
            return _cp1252_or_latin1(data)
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
