"""The fast MIME reader (``normalizer/mime_tree.py``) builds the feed parser's tree, field for field.

Every message of the real-world corpus (as given and as the header-block repair hands it on),
crafted edge cases of the feed parser's algorithm, and Hypothesis-built MIME-shaped line
soups (boundaries that prefix each other, doubled and unclosed boundaries, envelope lines,
continuation lines, missing separators, ``\\r``/``\\n``/``\\r\\n`` line ends): where the fast
reader does not hand the input to the feed parser (``Fallback``), its tree equals the feed
parser's: headers, payload strings, preamble, epilogue, defects, default type, envelope line.
"""

from __future__ import annotations

import os
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32, default
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aecs_mongo.normalizer.header_block import repair_header_block
from aecs_mongo.normalizer.mime_tree import MAX_DEPTH, Fallback, parse_tree
from aecs_mongo.normalizer.parse import _POLICY

from .helpers.budgets import budget

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "eml"


def _tree(message: Message) -> dict[str, Any]:
    """Everything the parser sets on a message, children included."""
    skipped = ("_payload", "defects", "policy", "_field_index", "_derived")  # caches of _headers
    fields = {key: value for key, value in vars(message).items() if key not in skipped}
    fields["class"] = type(message).__name__
    fields["defects"] = [(type(defect).__name__, str(defect)) for defect in message.defects]
    payload = message._payload  # type: ignore[attr-defined]
    fields["payload"] = [_tree(child) for child in payload] if isinstance(payload, list) else payload
    return fields


def _same_as_feed_parser(raw: bytes) -> bool:
    """True when the fast reader built the feed parser's tree; False when it handed over."""
    expected = _tree(BytesParser(policy=_POLICY).parsebytes(raw))
    try:
        got = parse_tree(raw, _POLICY)
    except Fallback:
        return False
    assert _tree(got) == expected
    return True


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS} (../shared/corpus beside the repo)")
def test_corpus_trees_equal_the_feed_parsers() -> None:
    files = sorted(CORPUS.glob("*.eml"))
    assert len(files) > 400
    fast = 0
    for path in files:
        raw = path.read_bytes()
        for variant in {raw, repair_header_block(raw)}:
            fast += _same_as_feed_parser(variant)
    assert fast >= len(files) - 5  # the fast reader takes nearly all real mail itself


def _multipart(boundary: str, parts: list[str], *, preamble: str = "", epilogue: str = "", close: str = "--") -> str:
    body = "".join(f"--{boundary}\n{part}\n" for part in parts)
    return f"Content-Type: multipart/mixed; boundary={boundary}\n\n{preamble}{body}--{boundary}{close}\n{epilogue}"


MIXED = "Content-Type: multipart/mixed; boundary="
CASES = {
    "plain": "Subject: hi\nFrom: a@b.c\n\nbody\nline two\n",
    "no trailing newline": "Subject: hi\n\nbody",
    "headers only": "Subject: hi\nX: y\n",
    "empty": "",
    "crlf": (
        "Subject: hi\r\n" + MIXED + "b\r\n\r\npre\r\n--b\r\n\r\none\r\n--b\r\nContent-Type: text/html\r\n\r\n"
        "<p>x</p>\r\n--b--\r\nepi\r\n"
    ),
    "lone cr": "Subject: hi\rContent-Type: multipart/mixed; boundary=b\r\r--b\r\rone\r--b--\r",
    "preamble and epilogue": _multipart(
        "b", ["\none", "Content-Type: text/plain\n\ntwo"], preamble="pre\n", epilogue="epi\n"
    ),
    "empty epilogue line": _multipart("b", ["\none"], epilogue="\n"),
    "close without newline": MIXED + "b\n\n--b\n\none\n--b--",
    "close with blanks": MIXED + "b\n\n--b \t\n\none\n--b-- \n",
    "boundary prefixes": (
        MIXED + "ab\n\n--ab\nContent-Type: multipart/alternative; boundary=abc\n\n"
        "--abc\n\ninner\n--ab\n\nouter closes the inner\n--ab--\n"
    ),
    "inner prefixes outer": (
        MIXED + "abc\n\n--abc\nContent-Type: multipart/alternative; boundary=ab\n\n"
        "--ab\n\ninner\n--ab--\n--abc\n\nsecond\n--abc--\n"
    ),
    "same boundary nested": (
        MIXED + "b\n\n--b\nContent-Type: multipart/alternative; boundary=b\n\n--b\n\ninner\n--b--\nafter\n--b--\n"
    ),
    "missing close": MIXED + "b\n\n--b\n\none\n--b\n\ntwo\n",
    "missing start": MIXED + "b\n\nno boundary here\n--c\n",
    "close first": MIXED + "b\n\npre\n--b--\nafter\n",
    "doubled boundary": MIXED + "b\n\n--b\n--b\n\none\n--b--\n",
    "doubled boundary before the close": MIXED + "b\n\n--b\n\none\n--b\n--b--\n",
    "boundary then end": MIXED + "b\n\n--b\n",
    "no boundary parameter": "Content-Type: multipart/mixed\n\n--b\n\none\n--b--\n",
    "empty boundary": 'Content-Type: multipart/mixed; boundary=""\n\n--\n\none\n----\n',
    "base64 multipart": MIXED + "b\nContent-Transfer-Encoding: base64\n\n--b\n\none\n--b--\n",
    "digest": (
        "Content-Type: multipart/digest; boundary=d\n\n--d\n\nSubject: inner\n\ntext\n--d\nContent-Type: text/plain\n\n"
        "plain\n--d--\n"
    ),
    "message part": MIXED + "b\n\n--b\nContent-Type: message/rfc822\n\nSubject: in\n\nx\n--b--\n",
    "delivery status": (
        "Content-Type: multipart/report; boundary=b\n\n--b\nContent-Type: message/delivery-status\n\n"
        "Reporting-MTA: x\n\nAction: failed\n--b--\n"
    ),
    "no separator": "Subject: hi\nthis is no header\nmore\n",
    "continuation first": " folded\nSubject: hi\n\nbody\n",
    "envelope": "From someone Mon Jan 1 00:00:00 2024\nSubject: hi\n\nbody\n",
    "envelope in the middle": "Subject: hi\nFrom someone\nX: y\n\nbody\n",
    "envelope last": "Subject: hi\nFrom someone\n\nbody\n",
    "missing name": "Subject: hi\n: no name\n\nbody\n",
    "dashes in bodies": _multipart("b", ["\n--\n-- \n--bx\n--b-x\n---b\n", "\n--b is not alone\n"]),
    "boundary with colon": MIXED + '"x:y"\n\n--x:y\n--x:y\nA: b\n\none\n--x:y--\n',
    "inner part is the outer boundary": (
        MIXED + "o\n\n--o\nContent-Type: multipart/mixed; boundary=i\n\n--i\n--o\n\nlast\n--o--\n"
    ),
    "inner part header is the outer boundary": (
        MIXED + "o\n\n--o\nContent-Type: multipart/mixed; boundary=i\n\n--i\nA: b\n--o\n\nlast\n--o--\n"
    ),
    "boundary inside a dash line": MIXED + '"1"\n\n----1\n--1\n\none\n--1--\n',
    "8-bit": "Subject: caf\xe9\n\nna\xefve\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_crafted_trees_equal_the_feed_parsers(name: str) -> None:
    raw = CASES[name].encode("latin-1")
    handled = _same_as_feed_parser(raw)
    # where the feed parser pushes back something other than the line it read: its own path
    handed_over = {
        "boundary then end",
        "envelope last",
        "doubled boundary before the close",
        "inner part is the outer boundary",
    }
    assert handled == (name not in handed_over)


def test_deep_nesting_goes_to_the_feed_parser() -> None:
    depth = MAX_DEPTH + 5
    head = "".join(f"--b{i}\nContent-Type: multipart/mixed; boundary=b{i + 1}\n\n" for i in range(depth))
    raw = f"Content-Type: multipart/mixed; boundary=b0\n\n{head}--b{depth}\n\nleaf\n".encode()
    assert not _same_as_feed_parser(raw)
    shallow = f"Content-Type: multipart/mixed; boundary=b0\n\n{head[: head.index('--b5')]}--b5\n\nleaf\n".encode()
    assert _same_as_feed_parser(shallow)


_LINES = [
    "Content-Type: multipart/mixed; boundary=a",
    "Content-Type: multipart/alternative; boundary=ab",
    'Content-Type: multipart/related; boundary="a b"',
    "Content-Type: multipart/digest; boundary=d",
    "Content-Type: message/rfc822",
    "Content-Type: text/plain",
    "Content-Transfer-Encoding: base64",
    "--a",
    "--a--",
    "--a \t",
    "--ab",
    "--ab--",
    "--a b",
    "--a b--",
    "--d",
    "--d--",
    "--",
    "----",
    "----a",
    "----a--",
    "---ab",
    "",
    "",
    "text",
    "From x",
    " continued",
    "X: y",
    ": no name",
    "Subject: s",
]


@settings(
    max_examples=budget("AECS_MIME_TREE_EXAMPLES", big=3000, small=300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI")),
)
@given(
    st.sampled_from(["", *(line + "\n" for line in _LINES[:4])]),
    st.lists(st.tuples(st.sampled_from(_LINES), st.sampled_from(["\n", "\r\n", "\r"])), max_size=40),
    st.booleans(),
)
def test_line_soups_build_the_feed_parsers_tree(start: str, lines: list[tuple[str, str]], last_newline: bool) -> None:
    text = start + "".join(line + end for line, end in lines)
    if not last_newline and lines:
        text = text[: -len(lines[-1][1])]
    _same_as_feed_parser(text.encode())


@pytest.mark.parametrize("policy", [compat32, default], ids=["compat32", "default"])
def test_other_policies_get_the_feed_parsers_tree(policy: Any) -> None:
    """With the stock compat32 fields written out, and with another policy's own field parsing."""
    for name, text in CASES.items():
        raw = text.encode("latin-1")
        expected = _tree(BytesParser(policy=policy).parsebytes(raw))
        try:
            got = parse_tree(raw, policy)
        except Fallback:
            continue
        assert _tree(got) == expected, name
