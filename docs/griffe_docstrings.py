"""A Griffe extension for the manual's API reference (mkdocs.yml loads it through mkdocstrings).

- Every public name of ``aecs_mongo.__all__`` must have a docstring: one without (or one whose
  import cannot be followed) is logged as a warning, which ``mkdocs build --strict`` turns into
  a failed build. ``tests/test_docs.py`` checks the same rule in the test suite.
- The package's docstrings use Sphinx roles (``:mod:`aecs_mongo.cli```); Markdown has none, so
  they are rendered as inline code.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import griffe

# a logger under "mkdocs": MkDocs counts its warnings, and strict mode fails the build on them
_log = logging.getLogger("mkdocs.plugins.aecs_mongo.docstrings")

_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`~?([^`]+)`")


def _unrole(obj: griffe.Object) -> None:
    """Sphinx roles in ``obj``'s docstring and its members' (not through aliases) become code."""
    if obj.docstring is not None:
        obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _unrole(member)  # type: ignore[arg-type]


class RequireDocstrings(griffe.Extension):
    """Warn about every name of ``aecs_mongo.__all__`` that has no docstring."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "aecs_mongo":
            return
        _unrole(pkg)
        exports = pkg.exports
        if not exports:
            _log.warning("aecs_mongo.__all__ was not found: the reference cannot be checked")
            return
        for name in sorted(exports):
            try:
                obj = pkg[name]
                target = obj.final_target if obj.is_alias else obj
                docstring = target.docstring
            except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError) as exc:
                _log.warning("aecs_mongo.%s (in __all__) cannot be followed to its definition: %s", name, exc)
                continue
            if docstring is None or not docstring.value.strip():
                _log.warning("aecs_mongo.%s (in __all__) has no docstring", name)
