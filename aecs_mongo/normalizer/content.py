"""Content levels ``text`` -> ``clean`` -> ``forAI`` (AECS-1 §4.3 and the §4.3.1 preservation rules).

Line kinds (§4.3.1): a *quoted* line starts with ``>``; an *attribution* line introduces a
quote (``On <date>, <name> wrote:``, also wrapped onto a second line ending ``wrote:``, and
the German, French and Spanish forms); *unprefixed history* starts at an ``Original Message``
separator or at a ``From:`` line followed within five lines by ``Sent:``/``Date:``/``To:``/
``Subject:`` (an underscore divider directly above such a block belongs to it; a block under
a forwarded-message marker is forwarded content and is kept); everything else non-blank is
*authored*.

``clean``:

1. history is cut from its first line to the end;
2. quoted and attribution lines after the last authored line are removed; attribution lines
   elsewhere are removed too; authored lines are never removed;
3. each run of quoted lines directly above an authored line keeps its last
   :data:`QUOTE_CONTEXT_LINES` lines, the rest is replaced by ``> [N quoted lines omitted]``;
4. a trailing signature block is removed only when it is short: the ``--`` delimiter with at
   most 10 non-empty lines after it, a ``Sent from my ...`` line with at most 2, a
   confidentiality disclaimer with at most 14, a closing salutation (``Thanks,``,
   ``Best regards``, ...) in the last lines with at most 2 short lines after it and no
   question in them. A marker followed by more text is a lookalike and nothing is removed;
5. if that leaves nothing of a non-empty ``text``, ``clean`` is ``text`` and the caller sets
   ``processing.cleanFallback``.

``forAI`` is ``clean`` with whitespace normalized (runs of blanks, non-breaking and
zero-width spaces, at most one empty line in a row), inline image references removed
(``[cid:...]``, ``[image: ...]``, ``cid:``/``data:`` URIs), each forwarded-message marker and
the header block under it collapsed into one summary line, then truncated to the limit with a
final ``\\n[truncated]`` (the total never exceeds the limit).
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_DISCLAIMER_LINES",
    "MAX_MOBILE_LINES",
    "MAX_SIGNATURE_LINES",
    "QUOTE_CONTEXT_LINES",
    "TRUNCATION_MARKER",
    "clean_text",
    "make_for_ai",
    "normalize_text",
    "strip_quoted_chains",
    "strip_signature",
]

#: Quoted lines kept, per quoted run, as context for the authored line below it.
QUOTE_CONTEXT_LINES = 3
#: Non-empty lines allowed after a signature marker for the block to count as a signature.
MAX_SIGNATURE_LINES = 10
MAX_MOBILE_LINES = 2
MAX_DISCLAIMER_LINES = 14
MAX_SALUTATION_LINES = 2
TRUNCATION_MARKER = "\n[truncated]"

# Runs of blanks other than one plain space (which would be replaced by itself): the same
# result as replacing every ``[ \t\f\v]+`` run, without a replacement per word of the text.
_HSPACE_RE = re.compile(r"(?: [ \t\f\v]|[\t\f\v])[ \t\f\v]*")
_NEWLINES_RE = re.compile(r"\r\n?")
_ORIGINAL_RE = re.compile(
    r"^-{2,}\s*(?:original message|ursprüngliche nachricht|original-nachricht|message d'origine|"
    r"mensaje original|messaggio originale|oorspronkelijk bericht|mensagem original)\s*-{2,}$",
    re.IGNORECASE,
)
_UNDERSCORE_DIVIDER_RE = re.compile(r"^_{5,}$")
_HEADER_FROM_RE = re.compile(r"^From:\s+\S+", re.IGNORECASE)
_HEADER_NEXT_RE = re.compile(r"^(?:Sent|Date|To|Subject):\s+", re.IGNORECASE)
_FORWARD_MARKER_RE = re.compile(
    r"^(?:[-_]{2,}\s*Forwarded message\s*[-_]{2,}|Begin forwarded message:)$", re.IGNORECASE
)
_ATTRIBUTION_RE = re.compile(
    r"^(?:On\b.+wrote:|Am\b.+schrieb\b.*:|Le\b.+a\s+écrit\s?:|El\b.+escribió\s?:)$", re.IGNORECASE
)
_ATTRIBUTION_START_RE = re.compile(r"^(?:On|Am|Le|El)\b.+", re.IGNORECASE)
_ATTRIBUTION_END_RE = re.compile(r"(?:wrote:|schrieb\b.*:|a\s+écrit\s?:|escribió\s?:)$", re.IGNORECASE)
_DELIMITER_RE = re.compile(r"^--\s*$")
_MOBILE_RE = re.compile(
    r"^(?:Sent from my\b.{0,40}|Sent from (?:Outlook|Mail|Yahoo Mail|Gmail|Samsung|ProtonMail)\b.{0,40}|"
    r"Get Outlook for (?:iOS|Android).{0,20}|Von meinem \S+.{0,30}gesendet.{0,10}|"
    r"Envoyé de mon \S+.{0,30}|Enviado desde mi \S+.{0,30}|Inviato da(?:l mio)? \S+.{0,30})$",
    re.IGNORECASE,
)
_DISCLAIMER_RE = re.compile(
    r"^(?:confidentiality notice|confidential:|disclaimer:|privileged (?:and|&) confidential|"
    r"this (?:e-?mail|message|communication).*(?:confidential|intended only|intended solely)|"
    r"the information (?:contained )?in this (?:e-?mail|message|communication))",
    re.IGNORECASE,
)
_SALUTATION_RE = re.compile(
    r"^(?:best|best regards|regards|kind regards|warm regards|warmest regards|with regards|"
    r"best wishes|all the best|many thanks|thanks|thanks again|thank you|thx|cheers|"
    r"sincerely|yours sincerely|yours truly|yours|respectfully|br|mfg|"
    r"mit freundlichen grüßen|viele grüße|liebe grüße|gruß|grüße|cordialement|saludos)[,.!]?$",
    re.IGNORECASE,
)
_INLINE_IMAGE_RES = (
    re.compile(r"\[cid:[^\]\n]*\]", re.IGNORECASE),
    re.compile(r"\[image:[^\]\n]*\]", re.IGNORECASE),
    re.compile(r"<cid:[^>\s]*>", re.IGNORECASE),
    re.compile(r"\bcid:[^\s)\]>]+", re.IGNORECASE),
    re.compile(r"\bdata:image/[a-z0-9.+-]+;base64,[A-Za-z0-9+/=]+", re.IGNORECASE),
)
_FORWARD_HEADER_RE = re.compile(r"^(From|Date|Sent|Subject|To|Cc|Reply-To):\s*(.*)$", re.IGNORECASE)
_INVISIBLE_RE = re.compile("[\u200b\u2060\ufeff\u00ad]")
_UNICODE_SPACE_RE = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")
_MULTI_BLANK_RE = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """LF line ends, runs of blanks as one space, no trailing blanks, at most one empty line
    in a row, no leading or trailing empty lines (the reference ``normalizeText``)."""
    if "\r" in text:
        text = _NEWLINES_RE.sub("\n", text)
    # Whole-text passes (the blank runs hold no line break); a blank line is "" once stripped,
    # so runs of them are runs of "\n", and the final strip drops leading and trailing ones.
    text = "\n".join([line.rstrip() for line in _collapse_blanks(text).split("\n")])
    if "\n\n\n" in text:
        text = _MULTI_BLANK_RE.sub("\n\n", text)
    return text.strip()


def _collapse_blanks(text: str) -> str:
    """Each run of blanks (space, tab, form feed, vertical tab) as one space; the regular
    expression runs only where a run other than one space exists (``in`` is much faster)."""
    if "  " in text or "\t" in text or "\f" in text or "\v" in text:
        return _HSPACE_RE.sub(" ", text)
    return text


def _next_non_empty(lines: list[str], index: int) -> int:
    for position in range(index + 1, len(lines)):
        if lines[position].strip():
            return position
    return -1


def _previous_non_empty(lines: list[str], index: int) -> int:
    for position in range(index - 1, -1, -1):
        if lines[position].strip():
            return position
    return -1


def _is_header_block(lines: list[str], index: int) -> bool:
    if index < 0 or not _HEADER_FROM_RE.match(lines[index].strip()):
        return False
    return any(_HEADER_NEXT_RE.match(candidate.strip()) for candidate in lines[index + 1 : index + 6])


def _is_forward_marker(line: str) -> bool:
    line = line.strip()
    if not line or line[0] not in "-_Bb":  # the pattern's first characters (none folds to them)
        return False
    return bool(_FORWARD_MARKER_RE.match(line))


def _history_start(lines: list[str]) -> int:
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped[0] not in "-_Ff":
            continue
        if _ORIGINAL_RE.match(stripped):
            return index
        if _UNDERSCORE_DIVIDER_RE.match(stripped):
            if _is_header_block(lines, _next_non_empty(lines, index)):
                return index
            continue
        if _is_header_block(lines, index):
            previous = _previous_non_empty(lines, index)
            if previous < 0 or not _is_forward_marker(lines[previous]):
                return index
    return -1


_ATTRIBUTION_STARTS = frozenset({"on", "am", "le", "el"})


def _is_attribution(lines: list[str], index: int) -> bool:
    line = lines[index].strip()
    if line[:2].lower() not in _ATTRIBUTION_STARTS:
        return False  # both patterns start with one of these words (no other letter folds to them)
    if _ATTRIBUTION_RE.match(line):
        return True
    if not _ATTRIBUTION_START_RE.match(line) or index + 1 >= len(lines):
        return False
    following = lines[index + 1].strip()
    if len(following) > 80 or not _ATTRIBUTION_END_RE.search(following):
        return False
    after = lines[index + 2].strip() if index + 2 < len(lines) else ""
    return after == "" or after.startswith(">")


def _classify(lines: list[str]) -> list[str]:
    kinds: list[str] = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            kinds.append("blank")
        elif stripped[0] == ">":
            kinds.append("quoted")
        elif _is_attribution(lines, index) or (
            index > 0 and kinds[index - 1] == "attribution" and _ATTRIBUTION_END_RE.search(stripped)
        ):
            kinds.append("attribution")
        else:
            kinds.append("authored")
    return kinds


def strip_quoted_chains(text: str) -> str:
    """Remove unprefixed history, trailing quotes and attributions; keep every authored line."""
    return _strip_quoted(normalize_text(text))


def _strip_quoted(text: str) -> str:
    """:func:`strip_quoted_chains` of a text :func:`normalize_text` returned (it is idempotent)."""
    lines = text.split("\n")
    history = _history_start(lines)
    if history >= 0:
        lines = lines[:history]
    kinds = _classify(lines)
    try:
        last_authored = len(kinds) - 1 - kinds[::-1].index("authored")
    except ValueError:
        return ""
    out: list[str] = []
    quoted: list[str] = []
    for index in range(last_authored + 1):
        kind = kinds[index]
        if kind == "quoted":
            quoted.append(lines[index])
        elif kind == "authored":
            if quoted:
                kept = quoted[-QUOTE_CONTEXT_LINES:]
                omitted = len(quoted) - len(kept)
                if omitted:
                    out.append(f"> [{omitted} quoted line{'' if omitted == 1 else 's'} omitted]")
                out.extend(kept)
                quoted = []
            out.append(lines[index])
        elif kind == "blank" and not quoted:
            out.append(lines[index])
    return normalize_text("\n".join(out))


def _tail_size(lines: list[str], start: int) -> int:
    return sum(1 for line in lines[start + 1 :] if line.strip())


def _cut_marker(
    lines: list[str], pattern: re.Pattern[str], max_after: int, stripped: list[str] | None = None
) -> list[str] | None:
    """``lines`` up to the first line (not the first) ``pattern`` matches with at most
    ``max_after`` non-empty lines after it; ``stripped``: the lines stripped, if at hand."""
    if stripped is None:
        stripped = [line.strip() for line in lines]
    for index in range(1, len(lines)):
        if pattern.match(stripped[index]) and _tail_size(lines, index) <= max_after:
            return lines[:index]
    return None


def _cut_salutation(lines: list[str]) -> list[str] | None:
    for index in range(max(1, len(lines) - 4), len(lines)):
        if not _SALUTATION_RE.match(lines[index].strip()):
            continue
        tail = [line.strip() for line in lines[index + 1 :] if line.strip()]
        tail_text = " ".join(tail)
        if len(tail) <= MAX_SALUTATION_LINES and len(tail_text) <= 80 and "?" not in tail_text:
            return lines[:index]
    return None


def strip_signature(text: str) -> str:
    """Remove a short trailing signature block; a marker followed by more text is kept.

    The rules run in order (delimiter, mobile line, disclaimer, salutation) and repeat while
    one of them removes something, so ``-- `` + name + disclaimer goes in two steps. The
    first line is never removed by these rules.
    """
    return _strip_signature(normalize_text(text))


def _strip_signature(text: str) -> str:
    """:func:`strip_signature` of a normalized text."""
    lines = text.split("\n")
    for _ in range(4):
        stripped = [line.strip() for line in lines]
        cut = (
            _cut_marker(lines, _DELIMITER_RE, MAX_SIGNATURE_LINES, stripped)
            or _cut_marker(lines, _MOBILE_RE, MAX_MOBILE_LINES, stripped)
            or _cut_marker(lines, _DISCLAIMER_RE, MAX_DISCLAIMER_LINES, stripped)
            or _cut_salutation(lines)
        )
        if cut is None:
            return "\n".join(lines)  # normalized: the input, or normalize_text's output
        lines = normalize_text("\n".join(cut)).split("\n")
    return normalize_text("\n".join(lines))


def clean_text(text: str | None) -> tuple[str | None, bool]:
    """``(clean, cleanFallback)`` for a ``text`` level (``None`` stays ``None``)."""
    if text is None:
        return None, False
    # normalize_text is idempotent and each step returns its output normalized
    clean = _strip_signature(_strip_quoted(normalize_text(text)))
    if not clean and text.strip():
        return text, True
    return clean, False


def _collapse_forwards(lines: list[str]) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not _is_forward_marker(line):
            out.append(line)
            index += 1
            continue
        fields: list[str] = []
        position = index + 1
        while position < len(lines) and not lines[position].strip():
            position += 1
        while position < len(lines):
            match = _FORWARD_HEADER_RE.match(lines[position].strip())
            if match is None:
                break
            if match[2]:
                fields.append(f"{match[1].capitalize()}: {match[2]}")
            position += 1
        summary = "[Forwarded message]"
        if fields:
            summary += " " + "; ".join(fields)
        out.append(summary)
        index = position
    return out


def make_for_ai(clean: str | None, max_chars: int = 8000) -> str | None:
    """``forAI`` from ``clean``; at most ``max_chars`` characters (``>= len("[truncated]") + 1``)."""
    if clean is None:
        return None
    if max_chars < len(TRUNCATION_MARKER):
        raise ValueError(f"for_ai_max_chars must be at least {len(TRUNCATION_MARKER)}")
    text = _INVISIBLE_RE.sub("", clean) if not clean.isascii() else clean
    if not text.isascii():
        text = _UNICODE_SPACE_RE.sub(" ", text)
    lower = text.lower()
    if "cid:" in lower or "[image:" in lower or "data:image/" in lower:
        for pattern in _INLINE_IMAGE_RES:
            text = pattern.sub("", text)
    if "\r" in text:
        text = _NEWLINES_RE.sub("\n", text)
    # the blank runs hold no line break: one pass over the whole text, then each line stripped
    lines = [line.strip() for line in _collapse_blanks(text).split("\n")]
    if any(_is_forward_marker(line) for line in lines):
        lines = _collapse_forwards(lines)
    text = "\n".join(lines)
    if "\n\n\n" in text:
        text = _MULTI_BLANK_RE.sub("\n\n", text)
    text = text.strip()
    if len(text) > max_chars:
        text = text[: max_chars - len(TRUNCATION_MARKER)].rstrip() + TRUNCATION_MARKER
    return text
