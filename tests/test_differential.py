"""Differential tests: the normalizer field by field against independent parsers.

``scripts/differential.py`` does the work; here its agreement counts are pinned as a floor, so
they can only rise (after a normalizer fix, raise the pins with ``--print-pins``). Agreement is
not expected to be total: where a reference deviates from AECS-1 we follow the spec.

* postal-mime over the whole corpus: skipped when ``../shared/corpus`` or node/postal-mime is absent.
* the expected outputs stalwart, mime4j and MimeKit publish with their tests, committed in
  ``tests/published_expected`` (``$AECS_DIFFERENTIAL_EXPECTED`` points elsewhere): skipped only
  when ``../shared/corpus`` is absent.

The unit tests below feed the projections small documents written for the test.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("differential", REPO / "scripts" / "differential.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["differential"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


differential = _load_script()

# Agreement floors: the number of files on which each field agrees. Raise them after a fix
# (python scripts/differential.py --print-pins); a drop fails and lists the disagreements.
PINS: dict[str, dict[str, int]] = {
    "postal-mime": {
        "subject": 451,
        "from.address": 453,
        "from.name": 447,
        "to.addresses": 447,
        "cc.addresses": 452,
        "date": 455,
        "messageId": 443,
        "attachments.count": 451,
        "attachments.filenames": 451,
        "attachments.contentTypes": 451,
        "attachments.sizes": 401,
        "text": 351,
        "html": 141,
    },
    "stalwart": {
        "subject": 27,
        "from.address": 27,
        "from.name": 26,
        "to.addresses": 26,
        "cc.addresses": 27,
        "date": 26,
        "messageId": 27,
        "attachments.count": 15,
        "attachments.filenames": 15,
        "attachments.contentTypes": 15,
        "attachments.sizes": 15,
        "text": 10,
        "html": 7,
    },
    "mime4j": {
        "subject": 13,
        "from.address": 14,
        "messageId": 14,
        "attachments.named.filenames": 14,
        "attachments.named.contentTypes": 14,
        "attachments.named.sizes": 14,
        "text": 7,
    },
    "mimekit": {
        "subject": 20,
        "from.address": 20,
        "from.name": 20,
        "to.addresses": 20,
        "date": 19,
        "attachments.nonTextTypes": 16,
    },
}


def _corpus() -> Path:
    if not (differential.CORPUS / "manifest.tsv").is_file():
        pytest.skip(f"corpus not found at {differential.CORPUS} (it lives in ../shared/corpus beside the repository)")
    return Path(differential.CORPUS)


def _below_floor(report: Any, sources: list[str]) -> list[str]:
    failures = []
    for source in sources:
        counts = report.counts.get(source, {})
        for name, pin in PINS[source].items():
            agree = counts.get(name, {}).get("agree", 0)
            if agree < pin:
                listed = [
                    f"    {d.file}: ours {json.dumps(d.ours, ensure_ascii=False)[:200]}"
                    f" / theirs {json.dumps(d.theirs, ensure_ascii=False)[:200]}"
                    for d in report.disagreements
                    if d.source == source and d.field == name
                ]
                failures.append(
                    f"{source} {name}: {agree} agree, floor {pin}; disagreements now:\n" + "\n".join(listed)
                )
    return failures


def test_agreement_with_postal_mime_does_not_fall() -> None:
    corpus = _corpus()
    why = differential.postal_mime_available()
    if why:
        pytest.skip(why)
    report = differential.run(["postal-mime"], corpus)
    assert report.files["postal-mime"] == len(differential.read_manifest(corpus))
    failures = _below_floor(report, ["postal-mime"])
    assert not failures, "\n".join(failures)


def test_agreement_with_published_expected_outputs_does_not_fall() -> None:
    corpus = _corpus()
    expected = Path(differential.EXPECTED)
    present = [s for s in differential.PUBLISHED_SOURCES if (expected / s).is_dir()]
    if not present:
        pytest.skip(f"no published expected outputs at {expected} (see scripts/differential.py --extract-from-git)")
    report = differential.run(present, corpus, expected)
    failures = _below_floor(report, present)
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- the projections, on small inputs


def test_canonical_forms() -> None:
    assert differential.text_form(" a\r\n\tb  c ") == "a b c"
    assert differential.text_form("  \n") is None
    assert differential.message_id_form(" <x@y> ") == "x@y"
    assert differential.address_form(" A@Example.COM ") == "a@example.com"


def test_ours_projection_treats_a_synthetic_message_id_as_none() -> None:
    ours = differential.Ours(
        {
            "messageId": "generated-0123456789abcdef0123456789abcdef@aecs.local",
            "metadata": {"from": {"name": "Ann", "email": "Ann@X.test"}, "to": [], "cc": [], "subject": " hi "},
            "content": {"text": "one\r\ntwo", "html": None},
            "attachments": [{"filename": "", "contentType": "Message/Delivery-Status", "size": 3}],
        }
    )
    assert ours.facts["messageId"] is None
    assert ours.facts["from.address"] == "ann@x.test"
    assert ours.facts["text"] == "one two"
    assert ours.facts["attachments.contentTypes"] == ["message/delivery-status"]
    assert ours.facts["attachments.named.filenames"] == []


def test_postal_mime_projection() -> None:
    entry = {
        "file": "a.eml",
        "from": {"name": "", "group": [{"name": "Bo", "address": "bo@x.test"}]},
        "to": [{"name": "", "address": "c@x.test"}, {"name": "", "address": ""}],
        "cc": [],
        "subject": "Hi",
        "date": "2001-02-03T04:05:06.000Z",
        "messageId": "<m@x.test>",
        "text": "rendered from html",
        "textRendered": True,
        "html": "<p>x</p>",
        "htmlRendered": False,
        "attachments": [{"filename": None, "mimeType": "Image/PNG", "disposition": None, "size": 7}],
    }
    facts = differential.postal_mime_facts(entry)
    assert facts["from.address"] == "bo@x.test"
    assert facts["from.name"] == "Bo"
    assert facts["to.addresses"] == ["c@x.test"]  # the empty entry of a stray comma is dropped
    assert facts["date"] == "2001-02-03T04:05:06Z"
    assert facts["attachments.filenames"] == [""]
    assert facts["attachments.contentTypes"] == ["image/png"]
    assert "text" not in facts  # postal-mime's own rendering is not compared
    assert facts["html"] == "<p>x</p>"
    assert differential.postal_mime_facts({"file": "b.eml", "error": "boom"}) == {}


def _stalwart_message() -> dict[str, Any]:
    def header(name: str, value: Any) -> dict[str, Any]:
        return {"name": name, "value": value, "offset_field": 0, "offset_start": 0, "offset_end": 0}

    root = {
        "headers": [
            header("from", {"Address": {"List": [{"name": "Ann", "address": "ann@x.test"}]}}),
            header(
                "to", {"Address": {"Group": [{"name": "team", "addresses": [{"name": None, "address": "b@x.test"}]}]}}
            ),
            header("subject", {"Text": "Hello"}),
            header(
                "date",
                {
                    "DateTime": {
                        "year": 2020,
                        "month": 1,
                        "day": 2,
                        "hour": 3,
                        "minute": 4,
                        "second": 5,
                        "tz_before_gmt": True,
                        "tz_hour": 5,
                        "tz_minute": 30,
                    }
                },
            ),
        ],
        "body": {"Multipart": [1, 2]},
        "offset_header": 0,
        "offset_body": 0,
        "offset_end": 0,
    }
    text = {"headers": [], "body": {"Text": "body\n"}, "offset_header": 0, "offset_body": 0, "offset_end": 0}
    image = {
        "headers": [
            header("content_type", {"ContentType": {"c_type": "image", "c_subtype": "GIF", "attributes": None}}),
            header(
                "content_disposition",
                {"ContentType": {"c_type": "attachment", "attributes": [{"name": "filename", "value": "a.gif"}]}},
            ),
        ],
        "body": {"Binary": [71, 73, 70]},
        "offset_header": 0,
        "offset_body": 0,
        "offset_end": 0,
    }
    return {"html_body": [1], "text_body": [1], "attachments": [2], "parts": [root, text, image]}


def test_stalwart_projection_picks_the_file_for_our_line_endings(tmp_path: Path) -> None:
    row = differential.CorpusFile("s.eml", "stalwartlabs/mail-parser", "0" * 40, "resources/eml/x/000.eml", None)
    target = tmp_path / "stalwart" / "resources" / "eml" / "x"
    target.mkdir(parents=True)
    (target / "000.crlf.json").write_text(json.dumps(_stalwart_message()))
    assert differential.stalwart_facts(tmp_path, row, b"Subject: x\n\nbody\n") is None  # only the CRLF one exists
    facts = differential.stalwart_facts(tmp_path, row, b"Subject: x\r\n\r\nbody\r\n")
    assert facts is not None
    assert facts["from.address"] == "ann@x.test"
    assert facts["to.addresses"] == ["b@x.test"]
    assert facts["date"] == "2020-01-02T08:34:05Z"  # 03:04:05 -0530
    assert facts["messageId"] is None
    assert facts["attachments.filenames"] == ["a.gif"]
    assert facts["attachments.contentTypes"] == ["image/gif"]
    assert facts["attachments.sizes"] == [3]
    assert facts["text"] == "body"
    assert "html" not in facts  # the html body is the text part: a rendering, not published
    assert facts["_rfc822_inline"] == 0


def test_mime4j_projection(tmp_path: Path) -> None:
    row = differential.CorpusFile("m.eml", "apache/james-mime4j", "0" * 40, "t/one.msg", None)
    (tmp_path / "mime4j" / "t").mkdir(parents=True)
    (tmp_path / "mime4j" / "t" / "one_decoded.xml").write_text(
        "<message><header><field>\nSubject :  two\n words</field><field>\nFrom: Ann &lt;ann@x.test&gt;</field>"
        "<field>\nContent-Type: multipart/mixed; boundary=b</field></header><multipart><preamble/>"
        "<body-part><header><field>\nContent-Type: text/plain; charset=utf-8</field></header>"
        '<text-body name="one_1.txt"/></body-part>'
        '<body-part><header><field>\nContent-Type: application/pdf; name="r.pdf"</field></header>'
        '<binary-body name="one_2.bin"/></body-part></multipart></message>'
    )
    (tmp_path / "mime4j" / "t" / "one_1.txt").write_bytes("héllo\r\n".encode())
    (tmp_path / "mime4j" / "t" / "one_2.bin").write_bytes(b"12345")
    facts = differential.mime4j_facts(tmp_path, row, b"")
    assert facts == {
        "_rfc822_inline": False,
        "subject": "two words",
        "messageId": None,
        "from.address": "ann@x.test",
        "attachments.named.filenames": ["r.pdf"],
        "attachments.named.contentTypes": ["application/pdf"],
        "attachments.named.sizes": [5],
        "text": "héllo",
    }


def test_mimekit_projection(tmp_path: Path) -> None:
    summary = (
        'From - \nFrom: "Doe, Jane" <Jane@X.test>\nTo: a@x.test, "B \\"b\\"" <b@x.test>\nSubject: One\n'
        "Date: Mon, 01 Jan 0001 00:00:00 +0000\nContent-Type: multipart/mixed\n   Content-Type: text/plain\n"
        "   Content-Type: image/gif\n\nFrom - \nSubject: Two\nDate: Tue, 02 Jan 1996 10:00:00 -0700\n"
        "Content-Type: multipart/mixed\n   Content-Type: message/rfc822\n      Content-Type: text/plain\n\n"
    )
    (tmp_path / "mimekit" / "mbox").mkdir(parents=True)
    (tmp_path / "mimekit" / "mbox" / "box-summary.txt").write_text(summary)
    first = differential.CorpusFile("k0.eml", "jstedfast/MimeKit", "0" * 40, "mbox/box.mbox.txt", 0)
    second = differential.CorpusFile("k1.eml", "jstedfast/MimeKit", "0" * 40, "mbox/box.mbox.txt", 1)
    facts = differential.mimekit_facts(tmp_path, first, b"")
    assert facts == {
        "subject": "One",
        "from.address": "jane@x.test",
        "from.name": "Doe, Jane",
        "to.addresses": ["a@x.test", "b@x.test"],
        "date": None,
        "attachments.nonTextTypes": ["image/gif"],
    }
    facts = differential.mimekit_facts(tmp_path, second, b"")
    assert facts is not None
    assert facts["from.address"] is None
    assert facts["date"] == "1996-01-02T17:00:00Z"
    assert "attachments.nonTextTypes" not in facts  # a message/* node: not comparable from the tree


def test_report_counts_and_sets_judged_disagreements_apart() -> None:
    report = differential.Report()
    report.add("postal-mime", "a.eml", {"subject": ("x", "x"), "messageId": (None, "12345")})
    report.add("postal-mime", "b.eml", {"subject": ("x", "y"), "messageId": (None, "a@b")})
    counts = report.counts["postal-mime"]
    assert counts["subject"] == {"agree": 1, "disagree": 1, "judged": 0}
    # "12345" has no '@', so a synthetic id is what AECS-1 §5.1 asks for; "a@b" is valid
    assert counts["messageId"] == {"agree": 0, "disagree": 1, "judged": 1}
    assert [(d.file, d.field) for d in report.disagreements] == [("b.eml", "subject"), ("b.eml", "messageId")]
    assert report.pins() == {"postal-mime": {"subject": 1, "messageId": 0}}
    # a forwarded message parsed in place (DESIGN.md) against stalwart's one attachment: judged
    kept: dict[str, Any] = {"attachments.contentTypes": ["message/rfc822"]}
    parsed: dict[str, Any] = {"attachments.contentTypes": ["image/gif"]}
    for name, ours_facts, inline in (("c.eml", parsed, 1), ("d.eml", parsed, 0), ("e.eml", kept, 1)):
        context = {"_rfc822_inline": inline, "_ours": ours_facts}
        report.add("stalwart", name, {"attachments.count": (1, 2), "text": ("a b", "a")}, context)
    assert report.counts["stalwart"]["attachments.count"] == {"agree": 0, "disagree": 2, "judged": 1}
    assert report.counts["stalwart"]["text"] == {"agree": 0, "disagree": 2, "judged": 1}
    assert [d.file for d in report.judged if d.source == "stalwart"] == ["c.eml", "c.eml"]
    assert "PINS = {" in differential.format_pins(report)


def test_pairs_ignore_sizes_a_reference_does_not_publish() -> None:
    ours = differential.Ours({"messageId": "m@x", "metadata": {}, "content": {}, "attachments": []})
    ours.facts["attachments.sizes"] = [10, 20]
    assert differential.pairs_for(ours, {"attachments.sizes": [None, 20]}) == {
        "attachments.sizes": ([None, 20], [None, 20])
    }


def test_postal_mime_run_on_messages_written_for_the_test(tmp_path: Path) -> None:
    why = differential.postal_mime_available()
    if why:
        pytest.skip(why)
    (tmp_path / "eml").mkdir()
    (tmp_path / "eml" / "one.eml").write_bytes(
        b"From: Ann <ann@x.test>\r\nTo: bo@x.test\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\n"
        b"Date: Tue, 02 Jan 1996 10:00:00 -0700\r\nMessage-ID: <1@x.test>\r\n\r\nHello\r\n"
    )
    (tmp_path / "manifest.tsv").write_text("name\trepo\tcommit\tpath\tmbox_part\tsha256\none.eml\tr/r\tc\tp\t\ts\n")
    report = differential.run(["postal-mime"], tmp_path)
    assert report.files == {"postal-mime": 1}
    assert report.disagreements == []
    assert report.counts["postal-mime"]["subject"] == {"agree": 1, "disagree": 0, "judged": 0}
    assert report.counts["postal-mime"]["date"]["agree"] == 1
    assert report.counts["postal-mime"]["text"]["agree"] == 1
