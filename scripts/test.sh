#!/usr/bin/env bash
# Set up everything the tests need (a venv with the package and its test extra, mongosh from
# npm) and run every check CI runs. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
if [ -f package.json ] && [ ! -x node_modules/.bin/mongosh ]; then
  npm install --no-audit --no-fund --silent
fi
export PATH="$PWD/node_modules/.bin:$PATH"

.venv/bin/python scripts/unasync.py --check
if [ -f scripts/gen_indexes_js.py ]; then .venv/bin/python scripts/gen_indexes_js.py --check; fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy --strict aecs_mongo
.venv/bin/python -m pytest "$@"
