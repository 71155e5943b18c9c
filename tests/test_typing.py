"""The typed API under ``mypy --strict``: a user's correct code checks clean, and a wrong field
type or a misspelt record key is reported where it is written."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]


def mypy_strict(path: Path) -> tuple[str, int]:
    out, err, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--config-file", str(ROOT / "pyproject.toml"), str(path)]
    )
    return out + err, status


def test_correct_use_of_the_typed_api_checks_clean() -> None:
    out, status = mypy_strict(ROOT / "tests" / "helpers" / "typed_usage.py")
    assert status == 0, out


def test_wrong_field_types_are_reported(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_usage.py"
    wrong.write_text(
        "from aecs_mongo import MessageStore, NormalizedEmail\n"
        "\n"
        "\n"
        "def use(store: MessageStore) -> None:\n"
        '    email: NormalizedEmail = {"messageId": 1, "threadId": "t"}\n'  # line 5
        "    store.store(email)\n"
        "    page = store.list_messages()\n"
        '    page.messages[0]["ts"].upper()\n'  # line 8: ts is an int
        '    print(page.messages[0]["subjekt"])\n'  # line 9: no such key
        '    attachments: NormalizedEmail = {"messageId": "m", "threadId": "t", "attachments": [{"size": 1}]}\n'
    )
    out, status = mypy_strict(wrong)
    assert status == 1, out
    lines = {line.split(": error: ")[0].rsplit(":", 1)[-1]: line for line in out.splitlines() if ": error: " in line}
    assert 'Incompatible types (expression has type "int", TypedDict item "messageId" has type "str")' in lines["5"]
    assert '"int" has no attribute "upper"' in lines["8"]
    assert '"MessageSummary" has no key "subjekt"' in lines["9"]
    assert "Missing keys" in lines["10"] and 'TypedDict "Attachment"' in lines["10"]
    assert '"filename"' in lines["10"] and '"contentType"' in lines["10"]
    assert set(lines) == {"5", "8", "9", "10"}, out  # store.store(email) on line 6 is fine
