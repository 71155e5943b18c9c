"""Rules are named by what they are, in the code and in the command help.

No module of ``aecs_mongo`` or ``scripts`` (code, comments, docstrings) and no ``--help`` text of
the command line names a planning document or an issue number where it means a rule: "seed 003"
is "the POP3 pipeline's header lookups", "C.4 order" is "the write order (blobs, bodies,
messages, threads)", "issue 41" says nothing to a reader of the code. The AECS-1 specification
may be named; its appendix's section numbers used as names may not. History belongs to the
CHANGELOG and the manual.

Each check has a test that shows it can fail, on a small string or tree.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import aecs_mongo
from aecs_mongo import cli

PACKAGE = Path(aecs_mongo.__file__).resolve().parent
ROOT = PACKAGE.parent

#: A planning document or an issue used as a name: "seed 003", "seed-000's", "C.4", "issue 41",
#: "issues 41 and 43", "stop 12", "Appendix C", "DESIGN" (the design notes).
PLANNING_NAME = re.compile(
    r"\bseeds?[ -]?[0-9]+|\bC\.[0-9]+|\bissues? #?[0-9]+|\bstop [0-9]+|\bappendix C\b|(?-i:\bDESIGN\b)",
    re.IGNORECASE,
)


def planning_names(text: str) -> list[str]:
    """``line: match`` for each place ``text`` names a planning document or an issue."""
    return [
        f"{number}: {match.group(0)!r}"
        for number, line in enumerate(text.splitlines(), 1)
        for match in PLANNING_NAME.finditer(line)
    ]


def source_problems(*roots: Path) -> list[str]:
    """Every ``.py`` file under ``roots`` that names a planning document or an issue."""
    return [
        f"{path.relative_to(root.parent)}:{found}"
        for root in roots
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
        for found in planning_names(path.read_text(encoding="utf-8"))
    ]


def help_texts(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """``(prog, text)`` for a parser's whole ``--help`` and, recursively, its subcommands'."""
    yield parser.prog, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from help_texts(sub)


def help_problems(parser: argparse.ArgumentParser) -> list[str]:
    return [f"{prog} --help: {found}" for prog, text in help_texts(parser) for found in planning_names(text)]


def test_no_module_names_a_planning_document_or_an_issue() -> None:
    """``synchronous/`` is generated from ``asynchronous/`` and checked all the same."""
    assert source_problems(PACKAGE, ROOT / "scripts") == []


def test_no_command_help_names_a_planning_document_or_an_issue() -> None:
    assert help_problems(cli.build_parser()) == []


def test_the_prose_check_finds_planning_names(tmp_path: Path) -> None:
    assert planning_names("the header lookups of seed 003") == ["1: 'seed 003'"]
    assert planning_names("x\nC.4 order, batched (issue 41; Seed-000's fallback)") == [
        "2: 'C.4'",
        "2: 'issue 41'",
        "2: 'Seed-000'",
    ]
    assert planning_names("the write order (blobs, bodies, messages, threads); AECS-1 says so") == []
    assert planning_names("by design (DESIGN, 'Decisions')") == ["1: 'DESIGN'"]
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "mod.py").write_text('"""Thread tags (issues 41 and 43)."""\n', encoding="utf-8")
    (package / "ok.py").write_text("# the message store's lookups\n", encoding="utf-8")
    assert source_problems(package) == ["pkg/sub/mod.py:1: 'issues 41'"]


def test_the_help_check_finds_planning_names() -> None:
    parser = argparse.ArgumentParser(prog="tool")
    sub = parser.add_subparsers()
    sub.add_parser("find", help="ids by header (seed 003 lookups)").add_argument("--x", help="fine")
    sub.add_parser("ok").add_argument("--y", help="the write order (C.4)")
    found = help_problems(parser)
    assert [problem.split(": ")[0] for problem in found] == ["tool --help", "tool ok --help"]
    assert "'seed 003'" in found[0] and "'C.4'" in found[1]
