"""The search query language (aecs_mongo/pure/search_query/): parser, printer, words, dates.

No server: the tree, its text and the tokenizer. The engines' agreement on real mail is in
tests/test_search_engines.py.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import sqlite3
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aecs_mongo import AecsMongoError, SearchQueryError
from aecs_mongo.normalizer.html_text import html_text_pieces, html_to_text
from aecs_mongo.pure import search_query as sq
from aecs_mongo.pure.keys import strip_message_id
from aecs_mongo.pure.search_query import And, Date, Not, Or, Phrase, Thread, Word, parse, to_text
from aecs_mongo.pure.search_query.snippets import _cut
from aecs_mongo.pure.search_query.tokens import WORD

from .helpers.paths import ROOT
from .helpers.search import SEARCH_EXAMPLES, corpus_columns, corpus_haystacks

# --- what queries mean ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "tree"),
    [
        ("budget köln", And((Word("budget"), Word("köln")))),
        ('"quarterly budget"', Phrase(("quarterly", "budget"))),
        ('"budget"', Word("budget")),  # a phrase of one word is the word
        ("budg*", Word("budg", prefix=True)),
        ("a OR b", Or((Word("a"), Word("b")))),
        ("a b OR c", Or((And((Word("a"), Word("b"))), Word("c")))),  # AND binds tighter than OR
        ("a (b OR c)", And((Word("a"), Or((Word("b"), Word("c")))))),
        ("NOT a b", And((Not(Word("a")), Word("b")))),
        ("-a b", And((Not(Word("a")), Word("b")))),
        ("a AND b", And((Word("a"), Word("b")))),
        ("NOT NOT a", Word("a")),
        ("or not and", And((Word("or"), Word("not"), Word("and")))),  # lower case: words
        ("from:bob@example.com", Phrase(("bob", "example", "com"), "from")),
        ('From:"Anna Müller"', Phrase(("Anna", "Müller"), "from")),
        ("to:(alice OR bob)", Or((Word("alice", "to"), Word("bob", "to")))),
        (
            "subject:re* body:draft attachment:pdf",
            And((Word("re", "subject", True), Word("draft", "body"), Word("pdf", "attachment"))),
        ),
        ("thread:<root@example.com>", Thread("root@example.com")),
        ("date:2024-03-01..2024-03-31", Date("2024-03-01", "2024-03-31")),
        ("date:2024..", Date("2024", None)),
        ("date:..2023-12", Date(None, "2023-12")),
        ("date:30d..", Date("30d", None)),
        ("date:2024-03", Date("2024-03", "2024-03")),
        ("http://example.com/x", Phrase(("http", "example", "com", "x"))),  # not a field: words
        ("foo-bar", Phrase(("foo", "bar"))),
        ("   ", None),
    ],
)
def test_queries_parse_to_their_tree(query: str, tree: Any) -> None:
    assert parse(query) == tree


@pytest.mark.parametrize(
    ("query", "position", "says"),
    [
        ("(budget", 0, 'a "(" that is never closed'),
        ("budget)", 6, 'a ")" without its "("'),
        ("a ()", 3, 'an empty "( )"'),
        ("budget OR", 7, "OR needs something on both sides"),
        ("OR budget", 0, "OR needs something on both sides"),
        ("a AND", 2, "AND needs something on both sides"),
        ("NOT", 0, "NOT needs something after it"),
        ('"quarterly budget', 0, "a quote that is never closed"),
        ('"a"b', 3, "a space or a parenthesis must follow a closing quote"),
        ("from: bob", 0, "from: needs a value"),
        ("x date:2024-13-01", 2, "'2024-13-01' is not a date"),
        ("date:soon", 0, "is not a date"),
        ("a - b", 2, "'-' has no letters or digits to search for"),
        ('"!!"', 0, '"!!" has no letters or digits'),
        ("from:(subject:x)", 6, "subject: inside from:(...)"),
        ("date:(2024)", 0, "date: takes one value"),
        ("thread:<>", 0, "thread: needs a thread id"),
    ],
)
def test_a_malformed_query_says_where(query: str, position: int, says: str) -> None:
    with pytest.raises(SearchQueryError) as raised:
        parse(query)
    assert raised.value.position == position
    assert says in str(raised.value) and f"at position {position}" in str(raised.value)
    assert isinstance(raised.value, AecsMongoError) and isinstance(raised.value, ValueError)


def test_hostile_queries_are_refused_cheaply() -> None:
    with pytest.raises(SearchQueryError, match="levels"):
        parse("(" * 100 + "a" + ")" * 100)
    with pytest.raises(SearchQueryError, match="levels"):
        parse("NOT " * 100 + "a")
    with pytest.raises(SearchQueryError, match="words and phrases"):
        parse(" ".join(f"w{i}" for i in range(sq.MAX_TERMS + 1)))
    with pytest.raises(SearchQueryError, match="characters long"):
        parse("a" * (sq.MAX_QUERY_CHARS + 1))
    with pytest.raises(TypeError):
        parse({"$regex": ".*"})  # type: ignore[arg-type]


def test_words_fold_case_and_latin_accents_and_split_like_fts5() -> None:
    # a decomposed accent (E + U+0301) is part of the word and removed, as FTS5 does
    assert sq.words("Köln KÖLN koeln café E\u0301cole") == ["koln", "koln", "koeln", "cafe", "ecole"]
    assert sq.words("bob@example.com, a_b c+d 10.5 日本語") == [
        "bob",
        "example",
        "com",
        "a",
        "b",
        "c",
        "d",
        "10",
        "5",
        "日本語",
    ]
    assert sq.words("ΣΊΣΥΦΟΣ Straße µ") == ["σίσυφοσ", "straße", "μ"]  # Greek keeps its accents, as FTS5 does


def test_dates_are_utc_periods_and_relative_bounds_count_from_today() -> None:
    now = dt.datetime(2024, 3, 15, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))  # 16 March UTC

    def ts(*day: int) -> int:
        return int(dt.datetime(*day, tzinfo=dt.UTC).timestamp())

    def span(query: str) -> tuple[int | None, int | None]:
        node = parse(query)
        assert isinstance(node, Date)
        return sq.date_range(node, now)

    assert span("date:2024-03-01..2024-03-31") == (ts(2024, 3, 1), ts(2024, 4, 1))
    assert span("date:2024-02") == (ts(2024, 2, 1), ts(2024, 3, 1))  # a leap February
    assert span("date:2023") == (ts(2023, 1, 1), ts(2024, 1, 1))
    assert span("date:30d..") == (ts(2024, 2, 15), None)
    assert span("date:..yesterday") == (None, ts(2024, 3, 16))
    assert span("date:today") == (ts(2024, 3, 16), ts(2024, 3, 17))
    assert span("date:1m..") == (ts(2024, 2, 16), None)
    assert span("date:2w..1w") == (ts(2024, 3, 2), ts(2024, 3, 10))


def test_snippets_are_cut_around_the_first_matched_word() -> None:
    text = "x " * 200 + "the Zürich office, then more " + "y " * 200
    found = sq.snippet([None, text], [Word("zurich")])
    assert found.startswith("…") and found.endswith("…") and "Zürich office" in found
    assert sq.snippet(["nothing here"], [Word("absent")]) == "nothing here"
    assert sq.snippet(["ab", "cd budgets"], [Word("budg", prefix=True)]) == "cd budgets"


def _snippet_from_the_start(texts: list[str | None], terms: list[Word], width: int) -> str:
    """``snippet`` as it was: every text tokenized from its first character."""
    wanted = [(sq.fold(t.text), t.prefix) for t in terms]
    first = ""
    for text in texts:
        if not text:
            continue
        flat = " ".join(text.split())
        first = first or flat
        for start, _end, word in sq.token_spans(flat):
            if any(word == w or (prefix and word.startswith(w)) for w, prefix in wanted):
                return _cut(flat, max(start - width // 3, 0), width)
    return _cut(first, 0, width) if first else ""


_snippet_chars = st.sampled_from(list("ab meEtinG x-_.,'KößéİÅǄ…\u0301\u212a\n\t12")) | st.characters()


@given(
    st.lists(st.none() | st.text(_snippet_chars, max_size=60), max_size=3),
    st.lists(
        st.builds(
            Word,
            st.sampled_from(["meeting", "mee", "a", "ab", "koln", "köln", "12", "e", "k", "ss", "dz", "ø"]),
            prefix=st.booleans(),
        ),
        min_size=1,
        max_size=2,
    ),
    st.integers(1, 40),
)
@settings(max_examples=SEARCH_EXAMPLES, deadline=None)
def test_a_snippet_starts_where_tokenizing_from_the_start_finds_its_word(
    texts: list[str | None], terms: list[Word], width: int
) -> None:
    """The snippet skips the text before the first place a query word can be (and a text with
    none): the same snippet as tokenizing every text from its first character."""
    assert sq.snippet(texts, terms, width) == _snippet_from_the_start(texts, terms, width)


# --- print and parse round trip ------------------------------------------------------------------

# letters and digits that are word characters to FTS5 too (its tables are Unicode 6.1's: a letter
# Python's newer Unicode gained since, such as U+19B0, is no word to the language)
_word_chars = st.characters(categories=["Lu", "Ll", "Lo", "Nd"]).filter(lambda c: WORD.fullmatch(c) is not None)
_words = st.text(_word_chars, min_size=1, max_size=8) | st.sampled_from(
    ["AND", "OR", "NOT", "or", "not", "date", "from"]
)
_fields = st.sampled_from([None, None, "from", "to", "subject", "body", "attachment"])
_bounds = st.sampled_from(
    ["2024", "2024-03", "2024-03-05", "1999-12-31", "30d", "2w", "6m", "1y", "today", "yesterday"]
)
_thread_ids = st.text(
    st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters='"'), min_size=1, max_size=12
).filter(lambda t: t == strip_message_id(t) and bool(t))


def _leaf() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(Word, _words, _fields, st.booleans()),
        st.builds(Phrase, st.lists(_words, min_size=2, max_size=4).map(tuple), _fields, st.booleans()),
        st.builds(Date, _bounds, st.none() | _bounds).map(lambda d: d if d.start is not None else Date(d.end, d.end)),
        st.builds(Date, st.none(), _bounds),
        st.builds(Thread, _thread_ids),
    )


_trees = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=4).map(sq.all_of),
        st.lists(inner, min_size=2, max_size=4).map(sq.any_of),
        inner.map(sq.negation),
    ),
    max_leaves=12,
)


@settings(max_examples=SEARCH_EXAMPLES, deadline=None)
@given(_trees)
def test_printing_a_tree_and_parsing_it_gives_it_back(tree: Any) -> None:
    text = to_text(tree)
    assert parse(text) == tree, text
    assert to_text(parse(text)) == text


_syntax = st.sampled_from([*'()"-*: ', "OR", "AND", "NOT", "from:", "date:", "thread:", "..", "30d", "x", "é"])


@settings(max_examples=SEARCH_EXAMPLES, deadline=None)
@given(st.one_of(st.text(max_size=80), st.lists(_syntax, max_size=30).map("".join)))
def test_random_text_parses_or_is_a_search_query_error(text: str) -> None:
    try:
        tree = parse(text)
    except SearchQueryError as exc:
        assert exc.position is not None and 0 <= exc.position <= len(text)
        return
    if tree is not None:  # what parsed prints to a query that parses to the same tree
        assert parse(to_text(tree)) == tree


# --- the Python words are FTS5's -----------------------------------------------------------------


def test_the_tokenizer_tables_are_this_sqlites_codepoint_by_codepoint() -> None:
    """scripts/gen_fts_tables.py asks SQLite about every codepoint; its tables are the module's."""
    spec = importlib.util.spec_from_file_location("gen_fts_tables", ROOT / "scripts" / "gen_fts_tables.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.generate() == (ROOT / "aecs_mongo" / "pure" / "fts_tables.py").read_text(encoding="utf-8")
    assert sq.words("q\U0001f5faq 🗺 ꭰ") == [
        "q🗺q",
        "🗺",
        "ꭰ",
    ]  # a newer emoji is a word character; a newer case pair not folded


def test_the_python_tokenizer_splits_and_folds_the_corpus_as_fts5_does() -> None:
    """Every column of every corpus message: FTS5's tokens (fts5vocab, in order) == ``words``."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        f"CREATE VIRTUAL TABLE t USING fts5({', '.join(sq.COLUMNS)}, tokenize='unicode61 remove_diacritics 2')"
    )
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    for rowid, columns in enumerate(corpus_columns(), 1):
        conn.execute(
            f"INSERT INTO t (rowid, {', '.join(sq.COLUMNS)}) VALUES (?{', ?' * len(sq.COLUMNS)})",
            (rowid, *columns.values()),
        )
    fts: dict[tuple[int, str], list[tuple[int, str]]] = {}
    for term, doc, col, offset in conn.execute("SELECT term, doc, col, offset FROM v"):
        fts.setdefault((doc, col), []).append((offset, term))
    checked = differ = 0
    for rowid, columns in enumerate(corpus_columns(), 1):
        for name, text in columns.items():
            expected = [term for _, term in sorted(fts.get((rowid, name), []))]
            checked += len(expected)
            differ += expected != sq.words(text)
    assert checked > 30_000 and differ == 0


@given(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
    | st.sampled_from(["Köln CAFÉ", "\u212aelvin", "Stra\u00dfe", "Ǆemal"])
)
@settings(max_examples=SEARCH_EXAMPLES, deadline=None)  # the first builds the fold table
def test_every_ascii_word_of_a_text_is_a_substring_of_its_ascii_fold(text: str) -> None:
    """The scan's pre-check (``ascii_folded``) never hides a match: each word of a text whose
    fold is ASCII is a substring of the text's ASCII fold (so a column without it is skipped
    before tokenizing, and only then)."""
    folded = sq.ascii_folded(text)
    for word in sq.words(text):
        if word.isascii():
            assert word in folded, (text, word, folded)
    assert sq.ascii_folded("Xylophön\u212a CAFÉ") == "xylophonk cafe"


def test_the_scan_s_pre_check_changes_no_answer() -> None:
    """``matches`` with the pre-check equals the tokenized match on accented and case-folded
    text, prefixes and phrases (the pre-check only skips columns that cannot hold the words)."""
    columns = {c: "" for c in sq.COLUMNS} | {"clean": "Le CAFÉ de Köln, \u212aelvin's xylo-phone"}

    def hit(query: str) -> bool:
        tree = parse(query)
        assert tree is not None
        return sq.matches(
            tree, columns, ts=0, thread_key="", now=dt.datetime.now(dt.UTC), shared_view=False, thread_key_of=str
        )

    assert hit("cafe") and hit("koln") and hit("kelvin") and hit("caf*") and hit('"cafe de koln"')
    assert hit("xylo") and hit("phone") and not hit("xylophone") and not hit("cafes") and not hit('"de cafe"')


def test_may_match_is_false_only_where_matches_is_false_on_the_corpus() -> None:
    """The scan tests ``may_match`` on a message's fields before building its columns: on every
    corpus message and every word of its columns (and queries of every kind), a match is never
    rejected, and a word the message does not hold is (so the test can fail both ways)."""
    now = dt.datetime.now(dt.UTC)
    common = {"ts": 0, "thread_key": "", "now": now, "shared_view": False, "thread_key_of": str}
    queries = ["xylophonist", "subject:re", "from:example.com", "attachment:pdf", '"thank you"', "pars*", "html"]
    queries += ["NOT the", "fouche", "to:example body:message", "(html OR text) NOT subject:re", "коллекция"]
    rejected = checked = 0
    for columns, haystacks in zip(corpus_columns(), corpus_haystacks(), strict=True):
        words = {w for text in columns.values() for w in sq.words(text)}
        for query in [*queries, *sorted(words)[::7]]:
            tree = parse(query)
            assert tree is not None
            may = sq.may_match(tree, haystacks, **common)
            if sq.matches(tree, columns, **common):
                checked += 1
                assert may, (query, columns)
            rejected += not may
        assert sq.may_match(parse("xylophonist"), {**haystacks, "html": None}, **common)  # not read: may hold
    assert checked > 3_000 and rejected > 3_000, (checked, rejected)


_HTML_BITS = ["<p>", "</p>", "<b>", "</b>", "<br>", "<!--", "-->", "<style>", "</style>", "<script a=1>", "</script>"]
_HTML_BITS += ["&amp;", "&eacute;", "&#120;", "&", "<", ">", "<td>", "<blockquote>", "<pre>", "\ue000", " ", "\n"]


@given(st.lists(st.sampled_from(_HTML_BITS) | st.text(alphabet="xyloAÉ é-", max_size=6), max_size=25).map("".join))
@settings(max_examples=SEARCH_EXAMPLES, deadline=None)
def test_every_word_of_an_html_part_is_a_substring_of_its_cheap_text(markup: str) -> None:
    """The scan's test of an HTML part (``html_text_pieces``, no layout) never hides a word that
    ``html_to_text`` gives: each ASCII-folded word is a substring of its ASCII fold."""
    folded = sq.ascii_folded(html_text_pieces(markup))
    for word in sq.words(html_to_text(markup)):
        if word.isascii():
            assert word in folded, (markup, word, folded)
