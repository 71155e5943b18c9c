"""Facts the package declares once, read from the source.

- Every ``__all__`` is one assignment of a list literal, sorted as ruff's RUF022 sorts it
  (constants, then classes, then the rest; digits by their value): no ``__all__ +=`` appendix
  that a reader of the list would miss, no list computed at run time. The generated
  ``synchronous/`` too: ``scripts/unasync.py`` sorts its lists again once ``Async`` is off.
- The package's public names: ``aecs_mongo/__init__.py`` states each one in its
  ``TYPE_CHECKING`` imports (what mypy sees), in ``__all__`` (what mypy and ``import *``
  export) and in ``_LAZY`` (where ``__getattr__`` imports it from on first use). mypy needs the
  first two as written and the lazy imports need the third at run time without parsing the
  source, so the three are checked to agree here (ruff's F401 catches an import left out of
  ``__all__`` too).

Each rule has a test that shows it can fail, on a small file in tmp_path.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import aecs_mongo

PACKAGE = Path(aecs_mongo.__file__).resolve().parent


def ruff_order(name: str) -> tuple[int, list[int | str]]:
    """RUF022's isort-style key: SCREAMING_CASE, then CamelCase, then the rest; digits by value."""
    category = 0 if len(name) > 1 and name.isupper() else 1 if name[:1].isupper() else 2
    return category, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _mentions_all(node: ast.AST) -> bool:
    """``node`` binds or changes ``__all__``: an assignment (plain, augmented, annotated) or a
    method call on it (``__all__.append(...)``, ``.extend``...)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        targets = [node.func.value]
    else:
        return False
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def all_problems(path: Path) -> list[str]:
    """What keeps ``path``'s ``__all__`` (if it has one) from being one sorted list literal."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    statements = [node for node in ast.walk(tree) if _mentions_all(node)]
    if not statements:
        return []
    if len(statements) > 1:
        return [f"{path}: __all__ is built by {len(statements)} statements (lines {[s.lineno for s in statements]})"]
    (node,) = statements
    if not isinstance(node, ast.Assign) or node not in tree.body:
        return [f"{path}:{node.lineno}: __all__ is not one top-level assignment"]
    value = node.value
    if not isinstance(value, ast.List) or not all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
    ):
        return [f"{path}:{node.lineno}: __all__ is not a list literal of names"]
    names = [e.value for e in value.elts if isinstance(e, ast.Constant)]
    if names != sorted(names, key=ruff_order):
        return [f"{path}:{node.lineno}: __all__ is not sorted"]
    if len(set(names)) != len(names):
        return [f"{path}:{node.lineno}: __all__ names one twice"]
    return []


def test_every_all_is_one_sorted_list_literal() -> None:
    problems = [problem for path in sorted(PACKAGE.rglob("*.py")) for problem in all_problems(path)]
    assert not problems, "\n".join(problems)


def test_the_all_rule_finds_an_appendix_a_computed_list_and_disorder(tmp_path: Path) -> None:
    cases = {
        "ok.py": '__all__ = ["LIMIT", "Store", "open_store"]\n',
        "none.py": "X = 1\n",
        "appendix.py": '__all__ = ["a"]\n__all__ += ["b"]\n',
        "append.py": '__all__ = ["a"]\n__all__.append("b")\n',
        "computed.py": 'NAMES = ["a"]\n__all__ = sorted(NAMES)\n',
        "tuple.py": '__all__ = ("a", "b")\n',
        "nested.py": 'if True:\n    __all__ = ["a"]\n',
        "unsorted.py": '__all__ = ["open_store", "Store"]\n',
        "natural.py": '__all__ = ["part10", "part9"]\n',
        "twice.py": '__all__ = ["a", "a"]\n',
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    flagged = {name for name in cases if all_problems(tmp_path / name)}
    assert flagged == set(cases) - {"ok.py", "none.py"}


# --- the public names ----------------------------------------------------------------------------


def public_name_problems(path: Path) -> list[str]:
    """Where the ``TYPE_CHECKING`` imports, ``__all__`` and ``_LAZY`` of a package's
    ``__init__`` disagree: the same names, each from the same module (``__version__``, defined
    in the module itself, is in ``__all__`` alone)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    imported: dict[str, str] = {}
    listed: list[str] = []
    lazy: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.level:
                    module = "." * statement.level + (statement.module or "")
                    imported.update({alias.asname or alias.name: module for alias in statement.names})
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "__all__":
                listed = list(ast.literal_eval(node.value))
            elif node.targets[0].id == "_LAZY":
                lazy = dict(ast.literal_eval(node.value))
    problems = []
    if lazy != imported:
        wrong = sorted(set(lazy.items()) ^ set(imported.items()))
        problems.append(f"_LAZY and the TYPE_CHECKING imports differ: {wrong}")
    if set(listed) - {"__version__"} != set(imported):
        problems.append(f"__all__ and the TYPE_CHECKING imports differ: {sorted(set(listed) ^ set(imported))}")
    return problems


def test_the_public_names_agree() -> None:
    path = PACKAGE / "__init__.py"
    assert not public_name_problems(path)
    assert aecs_mongo.__all__ == sorted([*aecs_mongo._LAZY, "__version__"], key=ruff_order)


def test_the_public_names_check_finds_a_disagreement(tmp_path: Path) -> None:
    good = (
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    from .errors import AecsMongoError\n"
        "    from .synchronous.store import MessageStore\n"
        '__all__ = ["AecsMongoError", "MessageStore", "__version__"]\n'
        '_LAZY = {"AecsMongoError": ".errors", "MessageStore": ".synchronous.store"}\n'
    )
    variants = {
        "good": good,
        "not lazy": good.replace(', "MessageStore": ".synchronous.store"', ""),
        "lazy from elsewhere": good.replace('"MessageStore": ".synchronous.store"', '"MessageStore": ".store"'),
        "not listed": good.replace('"MessageStore", "__version__"', '"__version__"'),
        "listed only": good.replace('"__version__"]', '"__version__", "normalize"]'),
    }
    found = {}
    for name, text in variants.items():
        (tmp_path / "__init__.py").write_text(text, encoding="utf-8")
        found[name] = bool(public_name_problems(tmp_path / "__init__.py"))
    assert found == {
        "good": False,
        "not lazy": True,
        "lazy from elsewhere": True,
        "not listed": True,
        "listed only": True,
    }
