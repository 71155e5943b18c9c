"""The standard library's feed parser, read in jumps: the same ``Message`` tree in a fraction of the time.

:class:`email.feedparser.FeedParser` reads a message line by line: every line of every body
goes through a generator, a buffer object and the stack of boundary predicates, which made it
half of the normalizer's time. :func:`parse_tree` follows the very same algorithm (the
``_parsegen`` of CPython 3.11-3.13, decision for decision: the same headers through the
policy's ``header_source_parse``/``set_raw``, the same defects through ``handle_defect``, the
same preamble, epilogue and payload strings, the line break before a boundary trimmed the same
way), but where the feed parser tests each line of a body against the boundaries, it searches
the text for the next line starting with ``--`` and tests only those: a boundary line always
starts with ``--``. Header lines are still read one by one, as there.

The few paths where the feed parser pushes back something other than the line it just read
(an envelope ``From `` line at the end of a part's header block; a boundary line followed by
the end of its part) and multiparts nested deeper than :data:`MAX_DEPTH` raise
:class:`Fallback`, and the caller runs the feed parser itself. ``tests/test_mime_tree.py``
compares the two trees on every corpus message and on crafted edge cases.
"""

from __future__ import annotations

import re
from email import errors
from email.message import Message
from email.policy import Compat32
from typing import Any

__all__ = ["MAX_DEPTH", "Fallback", "parse_tree"]

#: Multiparts nested deeper than this go to the feed parser (whose recursion limit decides).
MAX_DEPTH = 64

# The feed parser's own patterns (email/feedparser.py).
_NLCRE = re.compile(r"\r\n|\r|\n")
_NLCRE_BOL = re.compile(r"(\r\n|\r|\n)")
_HEADER_RE = re.compile(r"^(From |[\041-\071\073-\176]*:|[\t ])")
_BOUNDARY_END_RE = re.compile(r"(?P<end>--)?(?P<ws>[ \t]*)(?P<linesep>\r\n|\r|\n)?$")


def _eol_length(text: str) -> int:
    """Length of the line break ending ``text`` (what ``(\\r\\n|\\r|\\n)\\Z`` finds), without a scan."""
    if text.endswith("\r\n"):
        return 2
    return 1 if text.endswith(("\n", "\r")) else 0


class Fallback(Exception):
    """This input takes a path the fast reader does not follow; use the feed parser."""


class _Boundary:
    """One multipart's boundary predicate (the feed parser's ``boundaryre.match``)."""

    __slots__ = ("separator",)

    def __init__(self, boundary: str) -> None:
        self.separator = "--" + boundary

    def match(self, line: str) -> re.Match[str] | None:
        if not line.startswith(self.separator):
            return None
        return _BOUNDARY_END_RE.match(line, len(self.separator))


class _Reader:
    """The feed parser's state over the whole text: a position instead of a line buffer."""

    def __init__(self, text: str, policy: Compat32) -> None:
        self.text = text
        self.length = len(text)
        # without any CR (LF-only mail) a line ends at its LF: one search per line, not two
        self.has_cr = "\r" in text
        self.pos = 0
        self.policy = policy
        factory: Any = policy.message_factory
        self.factory: Any = Message if factory is None else factory
        if getattr(self.factory, "get_content_maintype", None) is not Message.get_content_maintype:
            raise Fallback("the message factory reads the main type its own way")
        self.stock_fields = (
            getattr(self.factory, "set_raw", None) is Message.set_raw
            and type(policy).header_source_parse is Compat32.header_source_parse
        )
        self.eofstack: list[_Boundary] = []
        self.msgstack: list[Message] = []
        self.cur: Message | None = None
        self.last: Message | None = None

    # --- the input ------------------------------------------------------------------------
    def _line_end(self, pos: int) -> int:
        """End of the line starting at ``pos``: after its ``\\r\\n``, ``\\r`` or ``\\n``."""
        text = self.text
        lf = text.find("\n", pos)
        if not self.has_cr:
            return lf + 1 if lf >= 0 else self.length
        # a CR before the line's last character ends the line by itself (one right before the
        # LF is part of CRLF; no LF can come between pos and lf)
        cr = text.find("\r", pos, lf if lf >= 0 else self.length)
        if cr >= 0 and cr + 1 != lf:
            return cr + 1
        return lf + 1 if lf >= 0 else self.length

    def _at_eof(self, line: str) -> bool:
        if line[:2] != "--":
            return False
        return any(predicate.match(line) for predicate in self.eofstack)

    def readline(self) -> str:
        """The next line, or ``""`` at the end or at a line a boundary predicate matches."""
        if self.pos >= self.length:
            return ""
        end = self._line_end(self.pos)
        line = self.text[self.pos : end]
        if self.eofstack and self._at_eof(line):
            return ""
        self.pos = end
        return line

    def unreadline(self, line: str) -> None:
        if not line:
            raise Fallback("the feed parser pushes back an empty string here")
        self.pos -= len(line)

    def _next_dash_line(self, position: int) -> int:
        """Start of the first line at or after ``position`` (a line start) that begins with ``--``."""
        text = self.text
        if text.startswith("--", position):
            return position
        after_lf = text.find("\n--", position)
        if not self.has_cr:
            return after_lf + 1 if after_lf >= 0 else -1
        after_cr = text.find("\r--", position, after_lf if after_lf >= 0 else self.length)
        found = after_cr if after_cr >= 0 else after_lf
        return found + 1 if found >= 0 else -1

    def false_eof(self, also: _Boundary | None = None) -> tuple[int, re.Match[str] | None]:
        """Where reading line by line from ``pos`` would stop: ``(position, None)`` at the end
        or a predicate's line, ``(position, match)`` at a line ``also`` matches first."""
        if not self.eofstack and also is None:
            return self.length, None
        text = self.text
        position = self.pos
        while True:
            start = self._next_dash_line(position)
            if start < 0:
                return self.length, None
            end = self._line_end(start)
            line = text[start:end]
            if self.eofstack and self._at_eof(line):
                return start, None
            if also is not None:
                matched = also.match(line)
                if matched is not None:
                    return start, matched
            position = end  # the next line start (never inside this line: "----b" holds "--b")

    # --- messages -------------------------------------------------------------------------
    def new_message(self, in_digest: bool) -> None:
        msg = self.factory(policy=self.policy)
        if in_digest:  # the parent's type is multipart/digest (so it has a header and is true)
            msg.set_default_type("message/rfc822")
        if self.msgstack:
            self.msgstack[-1].attach(msg)
        self.msgstack.append(msg)
        self.cur = msg
        self.last = msg

    def pop_message(self) -> Message:
        retval = self.msgstack.pop()
        self.cur = self.msgstack[-1] if self.msgstack else None
        return retval

    def _field_adder(self, cur: Message) -> Any:
        """``cur.set_raw(*policy.header_source_parse(lines))``, written out where both are the
        stock ones (compat32's: the name before the first colon; the value with the blanks after
        the colon dropped, the continuation lines joined, the last line break removed)."""
        if not self.stock_fields:
            return lambda lines: cur.set_raw(*self.policy.header_source_parse(lines))
        fields = cur._headers  # type: ignore[attr-defined]

        def add(lines: list[str]) -> None:
            name, value = lines[0].split(":", 1)
            value = value.lstrip(" \t") + "".join(lines[1:])
            fields.append((name, value.rstrip("\r\n")))

        return add

    def parse_headers(self, lines: list[str]) -> None:
        cur = self.cur
        assert cur is not None
        lastheader = ""
        lastvalue: list[str] = []
        add = self._field_adder(cur)
        for lineno, line in enumerate(lines):
            if line[0] in " \t":
                if not lastheader:
                    self.policy.handle_defect(cur, errors.FirstHeaderLineIsContinuationDefect(line))
                    continue
                lastvalue.append(line)
                continue
            if lastheader:
                add(lastvalue)
                lastheader, lastvalue = "", []
            if line.startswith("From "):
                if lineno == 0:
                    line = line[: len(line) - _eol_length(line)]
                    cur.set_unixfrom(line)
                    continue
                if lineno == len(lines) - 1:
                    raise Fallback("envelope line at the end of a header block")
                cur.defects.append(errors.MisplacedEnvelopeHeaderDefect(line))
                continue
            i = line.find(":")
            if i == 0:
                cur.defects.append(errors.InvalidHeaderDefect("Missing header name."))
                continue
            assert i > 0, "_parse_headers fed line with no : and no leading WS"
            lastheader = line[:i]
            lastvalue = [line]
        if lastheader:
            add(lastvalue)

    def parsegen(self, depth: int, in_digest: bool = False) -> None:
        if depth > MAX_DEPTH:
            raise Fallback("nested too deep")
        self.new_message(in_digest)
        cur = self.cur
        assert cur is not None
        headers: list[str] = []
        while line := self.readline():
            if not _HEADER_RE.match(line):
                if not _NLCRE.match(line):
                    self.policy.handle_defect(cur, errors.MissingHeaderBodySeparatorDefect())
                    self.unreadline(line)
                break
            headers.append(line)
        self.parse_headers(headers)
        ctype = cur.get_content_type()
        maintype = ctype.split("/")[0]  # get_content_maintype (the factory does not override it)
        if ctype == "message/delivery-status" or maintype == "message":
            raise Fallback("message/* parsed as a nested message")
        if maintype == "multipart":
            self.multipart(cur, depth, ctype == "multipart/digest")
            return
        end, _ = self.false_eof()
        cur.set_payload(self.text[self.pos : end])
        self.pos = end

    def multipart(self, cur: Message, depth: int, digest: bool) -> None:
        boundary = cur.get_boundary()
        if boundary is None:
            self.policy.handle_defect(cur, errors.NoBoundaryInMultipartDefect())
            end, _ = self.false_eof()
            cur.set_payload(self.text[self.pos : end])
            self.pos = end
            return
        if str(cur.get("content-transfer-encoding", "8bit")).lower() not in ("7bit", "8bit", "binary"):
            self.policy.handle_defect(cur, errors.InvalidMultipartContentTransferEncodingDefect())
        boundaryre = _Boundary(boundary)
        # The preamble: up to the first boundary line (or a false end: no start boundary).
        start = self.pos
        end, first = self.false_eof(also=boundaryre)
        self.pos = end
        if first is None or first.group("end"):
            # No start boundary (a close boundary first counts as none): what was read is the
            # payload; the feed parser reads on to the false end and keeps an empty epilogue.
            self.policy.handle_defect(cur, errors.StartBoundaryNotFoundDefect())
            cur.set_payload(self.text[start:end])
            if first is not None:
                self.pos = self._line_end(end)
            self.pos, _ = self.false_eof()
            cur.epilogue = ""
            return
        if end > start:
            preamble = self.text[start:end]
            cur.preamble = preamble[: len(preamble) - _eol_length(preamble)]
        close_boundary_seen = False
        linesep: str | None = None
        while True:
            line = self.readline()
            if line == "":
                break
            mo = boundaryre.match(line)
            if mo is None:
                raise Fallback("a line after a part that is no boundary")  # the feed parser asserts
            if mo.group("end"):
                close_boundary_seen = True
                linesep = mo.group("linesep")
                break
            # consecutive boundary lines are one
            while True:
                line = self.readline()
                if boundaryre.match(line) is None:
                    self.unreadline(line)
                    break
            self.eofstack.append(boundaryre)
            self.parsegen(depth + 1, digest)
            last = self.last
            assert last is not None
            if last.get_content_maintype() == "multipart":
                epilogue = last.epilogue
                if epilogue == "":
                    last.epilogue = None
                elif epilogue is not None and _eol_length(epilogue):
                    last.epilogue = epilogue[: len(epilogue) - _eol_length(epilogue)]
            else:
                payload = last._payload  # type: ignore[attr-defined]
                if isinstance(payload, str) and _eol_length(payload):
                    last._payload = payload[: len(payload) - _eol_length(payload)]  # type: ignore[attr-defined]
            self.eofstack.pop()
            self.pop_message()
            self.last = self.cur
        if not close_boundary_seen:
            self.policy.handle_defect(cur, errors.CloseBoundaryNotFoundDefect())
            return
        start = self.pos
        end, _ = self.false_eof()
        self.pos = end
        epilogue_text = self.text[start:end]
        if linesep:
            cur.epilogue = epilogue_text
            return
        if epilogue_text:
            bol = _NLCRE_BOL.match(epilogue_text)
            if bol:
                epilogue_text = epilogue_text[len(bol.group(0)) :]
        cur.epilogue = epilogue_text


def parse_tree(raw: bytes, policy: Compat32) -> Message:
    """What ``BytesParser(policy=policy).parsebytes(raw)`` returns, built faster.

    Raises :class:`Fallback` where the caller must run the feed parser instead.
    """
    reader = _Reader(raw.decode("ascii", "surrogateescape"), policy)
    reader.parsegen(0)
    root = reader.pop_message()
    if root.get_content_maintype() == "multipart" and not root.is_multipart():
        policy.handle_defect(root, errors.MultipartInvariantViolationDefect())
    return root
