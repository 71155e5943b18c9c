"""The pure parts of the agent tools: hidden characters (pure/invisible.py), argument checks
against the schemas derived from the tools' typed signatures (agents/arguments.py, every cap
refused one past its bound and accepted at it), the byte cap (agents/shaping.fit) and the Bcc
fields of a raw message. No server: these are the rules; tests/test_agents.py runs them
through every tool."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aecs_mongo import ToolError
from aecs_mongo.agents import SPECS
from aecs_mongo.agents.arguments import check_arguments
from aecs_mongo.agents.bodies import drop_bcc_headers
from aecs_mongo.agents.shaping import fit, json_size, result
from aecs_mongo.agents.specs import (
    BODY_DEFAULT_CHARS,
    BODY_MAX_CHARS,
    LIST_FIELD_MAX,
    RAW_DEFAULT_BYTES,
    RAW_MAX_BYTES,
    SNIPPET_MAX_CHARS,
    STORE_MAX_BYTES,
    TAG_DEFAULT_MESSAGES,
    TAG_MAX_MESSAGES,
    THREAD_MAX_CHARS,
)
from aecs_mongo.pure.invisible import HIDDEN_PATTERN, escape_hidden, strip_hidden, strip_hidden_in, unescape_hidden

from .helpers.agents import BIDI_PAYLOAD, CAP_KEYS, CAPS, PERSIAN, TAG_PAYLOAD, VS_PAYLOAD, ZW_PAYLOAD, capped
from .helpers.budgets import budget

EXAMPLES = budget("AECS_HIDDEN_EXAMPLES", big=3000, small=300)
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji of three, joined
HIDDEN_CHARS = [chr(c) for c in range(0x110000) if HIDDEN_PATTERN.fullmatch(chr(c))]


@pytest.mark.parametrize(
    ("text", "expected", "removed"),
    [
        ("plain text", "plain text", 0),
        ("pay" + TAG_PAYLOAD + " now", "pay now", len(TAG_PAYLOAD)),
        ("file" + BIDI_PAYLOAD, "fileexe.txt", 2),
        ("a" + ZW_PAYLOAD + "b", "ab", len(ZW_PAYLOAD)),
        (PERSIAN, PERSIAN, 0),  # a lone ZWNJ between letters is typography: kept
        (FAMILY, FAMILY, 0),
        ("x\u200dy\u200d", "x\u200dy", 1),  # a joiner at the end joins nothing
        (" \u200c ", "  ", 1),
        ("\u2764\ufe0f", "\u2764\ufe0f", 0),  # one variation selector picks the emoji form: kept
        (VS_PAYLOAD, VS_PAYLOAD[:2], len(VS_PAYLOAD) - 2),  # data hidden in selectors: gone
        ("\ufe0fstart", "start", 1),
        ("\ufeffBOM", "BOM", 1),
        ("a\x1b[2Jb\x08c\x00", "a[2Jbc", 3),
        ("tab\tline\nreturn\r", "tab\tline\nreturn\r", 0),
        ("a\u200d\U000e0041\u200db", "ab", 3),  # removing the tag leaves a run of two joiners: gone too
        ("\u206aold\u206f format", "old format", 2),
    ],
)
def test_strip_hidden_on_crafted_text(text: str, expected: str, removed: int) -> None:
    assert strip_hidden(text) == (expected, removed)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(alphabet=st.one_of(st.characters(), st.sampled_from(HIDDEN_CHARS)), max_size=60))
def test_strip_hidden_leaves_nothing_to_strip_and_counts_what_it_took(text: str) -> None:
    cleaned, removed = strip_hidden(text)
    assert strip_hidden(cleaned) == (cleaned, 0)  # nothing hidden is left (and it is idempotent)
    assert len(cleaned) + removed == len(text)

    def visible(s: str) -> list[str]:
        return [c for c in s if not HIDDEN_PATTERN.fullmatch(c)]

    assert visible(text) == visible(cleaned)
    for i, char in enumerate(cleaned):  # what stays of the hidden kinds is typography only
        if HIDDEN_PATTERN.fullmatch(char):
            assert char in "\u200c\u200d" or unicodedata.category(char) == "Mn", repr(char)
            assert i > 0


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(st.one_of(st.characters(), st.sampled_from(HIDDEN_CHARS), st.sampled_from("\\u{}0A")), max_size=40))
def test_escaped_identifiers_show_nothing_hidden_and_come_back(text: str) -> None:
    escaped, count = escape_hidden(text)
    assert HIDDEN_PATTERN.search(escaped) is None and count == len(HIDDEN_PATTERN.findall(text))
    if "\\u{" not in text:  # an id that already holds an escape is not ours to tell apart
        assert unescape_hidden(escaped) == text


def test_strip_hidden_in_escapes_handles_and_strips_the_rest() -> None:
    value = {"messageId": "a\u200b@x", "subject": "s" + TAG_PAYLOAD, "to": [{"email": "b\u202e@y", "name": "n\u200b"}]}
    cleaned, count = strip_hidden_in(value, frozenset({"messageId", "email"}))
    assert cleaned == {"messageId": "a\\u{200B}@x", "subject": "s", "to": [{"email": "b\\u{202E}@y", "name": "n"}]}
    assert count == 3 + len(TAG_PAYLOAD)
    assert value["subject"] == "s" + TAG_PAYLOAD  # the input is left as it was


def test_arguments_are_checked_against_the_schema() -> None:
    spec = SPECS["get_message"]
    assert check_arguments(spec, {"message_id": "m@x"}) == {
        "message_id": "m@x",
        "max_chars": 8000,
        "body": "clean",
        "include_raw": False,
        "raw_max_bytes": 16384,
    }
    assert check_arguments(spec, {"message_id": "m@x", "max_chars": 200.0, "include_raw": None})["max_chars"] == 200
    for bad, message in [
        ({"message_id": 3}, "must be a string, not a number"),
        ({"message_id": "m", "max_chars": 1.5}, "must be an integer"),
        ({"message_id": "m", "include_raw": "yes"}, "true or false"),
        ({"message_id": "m", "extra": 1}, "no argument 'extra'"),
        ({"max_chars": 100}, "needs the argument 'message_id'"),
        ("m@x", "must be an object"),
    ]:
        with pytest.raises(ToolError, match=message):
            check_arguments(spec, bad)
    assert isinstance(ToolError("x"), ValueError)


#: a valid value of each argument a call needs, and an item of each array argument
REQUIRED = {"query": "x", "thread_id": "t@x", "message_id": "m@x", "address": "a@b.example", "raw": "x", "index": 0}
ITEMS = {"vector": 1.0, "message_ids": "m@x", "add": "todo", "remove": "todo"}


def test_every_capped_argument_states_its_caps_in_its_schema() -> None:
    """The derived schemas carry every cap, and every capped argument is in ``CAPS`` (a new
    one must be listed, and so tested below)."""
    for name, argument, caps in CAPS:
        assert capped(dict(SPECS[name].input_schema), argument) == caps, (name, argument)
    listed = {(name, argument) for name, argument, _ in CAPS}
    for name, spec in SPECS.items():
        for argument in spec.input_schema["properties"]:
            if capped(dict(spec.input_schema), argument):
                assert (name, argument) in listed, (name, argument)
    assert all(spec.input_schema["additionalProperties"] is False for spec in SPECS.values())


def test_the_descriptions_state_the_caps_the_code_keeps() -> None:
    """A tool's description (its docstring) states its byte cap, its count cap and default, and
    its other caps as the constants the code enforces."""
    for name, spec in SPECS.items():
        assert f"The result is at most {spec.max_bytes // 1024} KiB of JSON." in spec.description, name
        limit = spec.input_schema["properties"].get("limit")
        if limit is not None:
            assert f"(default {limit['default']}, at most {limit['maximum']}" in spec.description, name
    stated = {
        "search": [f"a snippet of at most {SNIPPET_MAX_CHARS} characters"],
        "get_thread": [f"(default and at most {THREAD_MAX_CHARS:,};"],
        "get_message": [
            f"(default {BODY_DEFAULT_CHARS:,}, at most {BODY_MAX_CHARS:,};",
            f"(at most {LIST_FIELD_MAX}; never their content)",
            f"(default {RAW_DEFAULT_BYTES:,}, at most {RAW_MAX_BYTES:,};",
        ],
        "store_message": [f"at most {STORE_MAX_BYTES >> 20} MiB"],
        "tag_messages": [f"(default {TAG_DEFAULT_MESSAGES}, at most {TAG_MAX_MESSAGES})"],
    }
    for name, phrases in stated.items():
        for phrase in phrases:
            assert phrase in SPECS[name].description, (name, phrase)
    defaults = {"get_thread": ("max_chars", THREAD_MAX_CHARS), "get_message": ("max_chars", BODY_DEFAULT_CHARS)}
    for name, (argument, value) in defaults.items():
        assert SPECS[name].input_schema["properties"][argument]["default"] == value


def _at(argument: str, key: str, bound: int) -> object:
    """A value of ``argument`` of size ``bound`` (a number, characters or items, as ``key`` counts)."""
    if key in ("minimum", "maximum"):
        return bound
    if key in ("minLength", "maxLength"):
        return "x" * bound
    return [ITEMS[argument]] * bound


@pytest.mark.parametrize(
    ("name", "argument", "key", "bound"),
    [(n, a, k, b) for n, a, caps in CAPS for k, b in caps.items() if k in CAP_KEYS],
    ids=lambda v: str(v),
)
def test_an_argument_past_its_cap_is_refused_and_one_at_it_is_taken(
    name: str, argument: str, key: str, bound: int
) -> None:
    spec = SPECS[name]
    base = {a: v for a, v in REQUIRED.items() if a in spec.input_schema.get("required", ())}
    at = check_arguments(spec, {**base, argument: _at(argument, key, bound)})
    assert at[argument] == _at(argument, key, bound)
    past = bound + 1 if key.startswith("max") else bound - 1
    with pytest.raises(ToolError) as refused:
        check_arguments(spec, {**base, argument: _at(argument, key, past)})
    message = str(refused.value)
    assert f"argument {argument!r}" in message, message
    if key == "minLength" and bound == 1:
        assert "must not be empty" in message
    else:
        assert str(bound) in message, message  # the bound it passed, said


def test_fit_shortens_the_longest_texts_then_drops_trailing_items() -> None:
    items = [{"messageId": f"m{i}@x", "text": "é" * (2000 + i)} for i in range(40)]
    shaped = fit(result(items), 20_000)
    assert json_size(shaped) <= 20_000 and shaped["truncated"]
    assert [m["messageId"] for m in shaped["mail"]] == [f"m{i}@x" for i in range(40)]  # handles are never cut
    handles_only = [{"messageId": "x" * 1000 + str(i)} for i in range(100)]
    shaped = fit(result(handles_only), 20_000)
    assert json_size(shaped) <= 20_000 and 0 < len(shaped["mail"]) < 100
    small = result([{"messageId": "m@x", "text": "hi"}])
    assert fit(small, 20_000) == small and not small["truncated"]


def test_drop_bcc_headers_only_in_the_header_section() -> None:
    raw = (
        "From: a@x\r\nBcc: secret@y,\r\n  other@z\r\nSubject: s\r\nResent-Bcc: r@y\r\nbcc : spaced@y\r\n\r\n"
        "Bcc: this line is the body\r\n"
    )
    kept = drop_bcc_headers(raw)
    assert kept == "From: a@x\r\nSubject: s\r\n\r\nBcc: this line is the body\r\n"
    assert drop_bcc_headers("Bcc: only@y") == ""
