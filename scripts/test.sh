#!/usr/bin/env bash
# Set up everything the tests need (a venv with the package and its test extra, mongosh from
# npm) and run every check CI runs. Extra arguments go to pytest. CI=true runs the big test
# budgets (tests/budgets.py); the default ones keep this under 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
# system packages for the POP3, IMAP and GDBM tests (a real Dovecot; gdbm_dump/gdbm_load); as root only
if ! command -v dovecot >/dev/null || ! command -v gdbm_dump >/dev/null || ! [ -x /usr/lib/dovecot/imap ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dovecot-core dovecot-pop3d dovecot-imapd gdbmtool openssl \
      python3-gdbm >/dev/null
  else
    echo "note: dovecot/dovecot-imapd/gdbmtool missing and not root: the POP3, IMAP and GDBM tests will skip" >&2
  fi
fi
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# (re)install only when pyproject.toml changed since the last install: the package itself is
# editable, so code changes need none, and pip's no-op run still costs seconds
stamp=.venv/.aecs-test-install
want="$(sha256sum pyproject.toml)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  echo "$want" >"$stamp"
fi
if [ ! -x node_modules/.bin/mongosh ]; then
  npm ci --no-audit --no-fund --silent
fi
export MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING=1
export PATH="$PWD/node_modules/.bin:$PATH"

.venv/bin/python scripts/unasync.py --check
.venv/bin/python scripts/gen_indexes_js.py --check
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy --strict aecs_mongo
.venv/bin/python -m pytest "$@"
