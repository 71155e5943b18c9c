"""Support code the test modules share; no test module imports another (tests/test_imports.py).

- ``paths``: the repository and ``../shared`` beside it.
- ``cli``: the command line as the tests run it (``Result``/``Cli`` of the ``cli`` fixture in
  conftest.py, ``aecs`` for a subprocess).
- ``factories``: small NormalizedEmail builders and thread-summary readers.
- ``agents``: crafted mail that hides text, a toy embedding, the checks of agent-tool results.
- ``mcp_client``: an MCP client session (the SDK's own client) over stdio or HTTP, for sync tests.
- ``lifecycle``: what a mailbox left in the database (``traces``, ``snapshot``).
- ``monitoring``: the ``Recorder`` of the reads a store sends (the ``recorded`` fixture).
- ``normalize``: the normalizer tests' processing time, ``parse`` and AECS-1 schema.
- ``budgets``: how much the long tests do (small, or big with ``CI=true``).
- ``failpoints``, ``mongosh``, ``dovecot``: the server failpoint, mongosh, a real Dovecot.
- ``children`` and the ``*_workers`` scripts: child processes the tests start and kill
  (``python -m tests.helpers.<name>``).
- ``typed_usage``: not run; ``mypy --strict`` checks it (tests/test_typing.py).
"""
