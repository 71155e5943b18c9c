"""Every message of the shared real-world corpus normalizes, validates and is deterministic.

Skipped when ``../shared/corpus`` is absent (the repository is checked out beside ``shared/``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo.normalizer import parse_email

from .helpers.normalize import PROCESSED, load_validator

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
EML = CORPUS / "eml"
REPO = Path(__file__).resolve().parents[1]


def corpus_files() -> list[Path]:
    if not EML.is_dir():
        pytest.skip(f"corpus not found at {EML} (it lives in ../shared/corpus beside the repository)")
    files = sorted(EML.glob("*.eml"))
    if not files:
        pytest.skip(f"no .eml files in {EML}")
    return files


def test_corpus_normalizes_validates_and_is_deterministic(caplog: pytest.LogCaptureFixture) -> None:
    files = corpus_files()
    validator = load_validator()
    failures: list[str] = []
    with caplog.at_level(logging.ERROR, logger="aecs_mongo.normalizer"):
        for path in files:
            raw = path.read_bytes()
            first = parse_email(raw, processed_at=PROCESSED)
            second = parse_email(raw)  # processedAt differs; everything else must not
            a, b = json.dumps(first.email, sort_keys=True), second.email
            b = dict(b, processing=dict(b["processing"], processedAt=PROCESSED))
            if a != json.dumps(b, sort_keys=True) or first.defects != second.defects:
                failures.append(f"{path.name}: not deterministic")
            if first.attachment_data != second.attachment_data:
                failures.append(f"{path.name}: attachment bytes differ between runs")
            for error in validator.iter_errors(first.email):
                failures.append(f"{path.name}: {list(error.path)} {error.message[:120]}")
            json.dumps(first.email, ensure_ascii=False).encode("utf-8")  # valid UTF-8, no lone surrogates
            attachments = first.email["attachments"]
            if [a["size"] for a in attachments] != [len(d) for d in first.attachment_data]:
                failures.append(f"{path.name}: attachment sizes do not match the bytes")
            if first.email["messageId"].startswith("generated-") and not any("Message-ID" in d for d in first.defects):
                failures.append(f"{path.name}: synthetic Message-ID without a recorded defect")
    assert failures == []
    assert len(files) >= 400


_DIGEST_SCRIPT = """
import hashlib, json, logging, sys
from pathlib import Path
logging.disable(logging.CRITICAL)
from aecs_mongo.normalizer import parse_email
digest = hashlib.sha256()
for path in sorted(Path(sys.argv[1]).glob("*.eml")):
    parsed = parse_email(path.read_bytes(), processed_at="2026-01-02T03:04:05Z")
    digest.update(json.dumps([parsed.email, parsed.defects, parsed.list_id], sort_keys=True).encode())
    for data in parsed.attachment_data:
        digest.update(hashlib.sha256(data).digest())
print(digest.hexdigest())
"""


def _digest_in(zone: str, locale: str) -> str:
    env: dict[str, Any] = dict(os.environ, TZ=zone, LC_ALL=locale, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", _DIGEST_SCRIPT, str(EML)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_corpus_output_is_independent_of_time_zone_and_locale() -> None:
    corpus_files()
    first = _digest_in("UTC", "C")
    assert len(first) == 64
    assert _digest_in("Pacific/Kiritimati", "tr_TR.UTF-8") == first
    assert _digest_in("America/St_Johns", "C.UTF-8") == first


def test_corpus_manifest_matches_files() -> None:
    files = corpus_files()
    manifest = CORPUS / "manifest.tsv"
    if not manifest.is_file():
        pytest.skip("manifest.tsv absent")
    rows = [line.split("\t") for line in manifest.read_text().splitlines()[1:] if line.strip()]
    expected = {row[0]: row[-1] for row in rows}
    actual = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}
    assert actual == expected
