"""HTML -> plain text: a linear tag scanner plus the standard library's ``html.unescape``.

(``html.parser`` did the same job at a third of the speed; mail HTML needs no DOM.)

* ``style``, ``script``, ``head``, ``title``, ``template`` and comments are dropped.
* Whitespace follows HTML: runs of spaces and line breaks in the source are one space,
  except inside ``pre``/``textarea``.
* Block elements (``p``, ``div``, ``h1``..``h6``, ``li``, ``tr``, ...) and ``br`` break lines;
  table cells are separated by a space.
* ``blockquote`` content is prefixed with ``> `` per nesting level, so the quote rules of
  AECS-1 §4.3.1 apply to HTML-only mail as they do to plain text.
* Character references are decoded (all of HTML5's named entities); images and links
  keep only their text (``alt`` text is not invented into the body).
"""

from __future__ import annotations

import html
import re

__all__ = ["html_text_pieces", "html_to_text", "text_to_html"]

_BLOCK = frozenset(
    {
        "address", "article", "aside", "center", "dd", "details", "dialog", "dir", "div", "dl",
        "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
        "h5", "h6", "header", "hr", "li", "main", "menu", "nav", "ol", "p", "section",
        "summary", "table", "tbody", "tfoot", "thead", "tr", "ul", "caption", "body", "html",
    }
)  # fmt: skip
_PRE = frozenset({"pre", "textarea", "listing", "plaintext", "xmp"})
_CELL = frozenset({"td", "th"})
_QUOTE_OPEN = "\ue000"
_QUOTE_CLOSE = "\ue001"
_MARKERS_RE = re.compile("[\ue000\ue001]")
# Whitespace runs to make one space, less the runs that are one space already (same result,
# without a replacement per word).
_SPACE_RE = re.compile(r"(?: [ \t\n\r\f\v]|[\t\n\r\f\v])[ \t\n\r\f\v]*")
_HSPACE_RE = re.compile(r"(?: [ \t\f\v\u00a0]|[\t\f\v\u00a0])[ \t\f\v\u00a0]*")
_MAX_DEPTH = 64


_SKIP_OPEN_RE = re.compile(r"<(style|script|head|title|template|noscript|xml)\b[^>]*>", re.IGNORECASE)
_SKIPPED_RE = re.compile(r"<!--|" + _SKIP_OPEN_RE.pattern, re.IGNORECASE)
_TOKEN_RE = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)[^>]*>|<!--|<[!?][^>]*>")


def _strip_skipped(markup: str) -> str:
    """Drop comments and the content of non-rendered elements, in one linear pass (from one
    comment or skipped element to the next: the tags between are left as they are)."""
    out: list[str] = []
    position = 0
    length = len(markup)
    while position < length:
        match = _SKIPPED_RE.search(markup, position)
        if match is None:
            break
        out.append(markup[position : match.start()])
        out.append(" ")
        if match[1] is None:  # a comment
            end = markup.find("-->", match.end())
            position = length if end < 0 else end + 3
            continue
        close = re.compile(rf"</{match[1]}\s*>", re.IGNORECASE).search(markup, match.end())
        position = length if close is None else close.end()
    out.append(markup[position:])
    return "".join(out)


def _convert(markup: str) -> str:
    out: list[str] = []
    pre = 0
    position = 0
    for match in _TOKEN_RE.finditer(markup):
        data = markup[position : match.start()]
        position = match.end()
        if data:
            data = html.unescape(data)
            if "\ue000" in data or "\ue001" in data:
                data = _MARKERS_RE.sub("", data)
            out.append(data.replace("\r\n", "\n").replace("\r", "\n") if pre else _SPACE_RE.sub(" ", data))
        tag = (match[2] or "").lower()
        if not tag:
            continue
        closing = bool(match[1])
        if tag == "br":
            out.append("\n")
        elif tag == "blockquote":
            out.append(f"\n{_QUOTE_CLOSE if closing else _QUOTE_OPEN}\n")
        elif tag in _BLOCK:
            out.append("\n")
        elif tag in _CELL and not closing:
            out.append(" ")
        if tag in _PRE:
            pre = max(0, pre - 1) if closing else pre + 1
            out.append("\n")
    tail = markup[position:]
    if tail:
        tail = _MARKERS_RE.sub("", html.unescape(tail))
        out.append(tail if pre else _SPACE_RE.sub(" ", tail))
    return "".join(out)


def _layout(raw: str) -> str:
    lines: list[str] = []
    depth = 0
    for line in raw.split("\n"):
        stripped = _HSPACE_RE.sub(" ", line).strip()
        if stripped == _QUOTE_OPEN:
            depth = min(depth + 1, _MAX_DEPTH)
            continue
        if stripped == _QUOTE_CLOSE:
            depth = max(depth - 1, 0)
            continue
        if depth:
            if stripped:
                lines.append("> " * depth + stripped)
            continue
        if not stripped and lines and not lines[-1]:
            continue
        lines.append(stripped)
    return "\n".join(lines).strip("\n")


def html_to_text(markup: str) -> str:
    """Readable plain text for an HTML body; never raises."""
    return _layout(_convert(_strip_skipped(markup)))


def html_text_pieces(markup: str) -> str:
    """The text of ``markup`` without its layout, cheaply (the search scan's test before
    ``html_to_text``): every word of ``html_to_text(markup)`` is a substring of it. The same
    steps as ``html_to_text`` up to its pieces of text between tags, each decoded, but joined
    with nothing between them (the layout only adds line breaks and spaces, and drops markers,
    dropped here too), in a few C-level calls instead of a Python step per tag."""
    if "<!--" in markup or _SKIP_OPEN_RE.search(markup):
        markup = _strip_skipped(markup)
    pieces = _TOKEN_RE.split(markup)[::3]  # the text between tags (the pattern has two groups)
    text = "".join(map(html.unescape, pieces)) if "&" in markup else "".join(pieces)
    return _MARKERS_RE.sub("", text)


def text_to_html(text: str) -> str:
    """Minimal HTML for a plain-text part that has no HTML alternative."""
    escaped = html.escape(text).replace("\r\n", "\n").replace("\n", "<br>\n")
    return f"<div>{escaped}</div>"
