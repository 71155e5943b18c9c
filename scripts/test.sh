#!/usr/bin/env bash
# Set up everything the tests need (a venv with the package and its test and docs extras, mongosh
# from npm) and run every check CI runs, the manual's strict build included. Extra arguments go
# to pytest. CI=true runs the big test budgets (tests/helpers/budgets.py); the default ones keep
# this around 5 minutes on 2 cores, set-up of a fresh clone included.
#
# Where the time goes and what is done about it (docs/contributing.md): the npm install runs in
# the background while pip installs and the linters and mypy run; node_modules is kept in a
# cache keyed on package-lock.json ($AECS_CACHE_DIR, default ~/.cache/aecs-mongo), so another
# clone on the same machine copies it instead of installing again; pytest runs two workers per
# core (pytest-xdist, each worker with its own servers: much of a server test is waiting on a
# server, a subprocess or a timeout, so one per core left the cores idle: 340 s vs 223 s of tests
# on 2 cores; AECS_TEST_WORKERS overrides, and an explicit -n or -p no:xdist wins).
set -euo pipefail
cd "$(dirname "$0")/.."
# Python's bytecode cache on: machines that set PYTHONDONTWRITEBYTECODE=1 (this project's do) made
# every interpreter the tests start compile every module it imports again, as pip installs here
# with --no-compile: an embedded server took 4.7 s to start instead of 1.2 s, a short command
# 0.9 s instead of 0.3 s. The .venv and the checkout's __pycache__ are ours (and git-ignored).
unset PYTHONDONTWRITEBYTECODE
# system packages: for the POP3, IMAP and GDBM tests (a real Dovecot; gdbm_dump/gdbm_load) every
# program and Dovecot service the tests start, each by the package that has it; for the
# attachment-text tests poppler's pdftotext (to compare PDF text with) and Tesseract (OCR). The
# missing ones installed as root, else named (their tests skip, naming what is missing; the
# Dovecot ones fail with AECS_REQUIRE_DOVECOT=1)
missing=()
command -v dovecot >/dev/null || [ -x /usr/sbin/dovecot ] || missing+=(dovecot-core)
[ -x /usr/lib/dovecot/pop3 ] || [ -x /usr/libexec/dovecot/pop3 ] || missing+=(dovecot-pop3d)
[ -x /usr/lib/dovecot/imap ] || [ -x /usr/libexec/dovecot/imap ] || missing+=(dovecot-imapd)
command -v gdbm_dump >/dev/null || missing+=(gdbmtool)
command -v openssl >/dev/null || missing+=(openssl)
command -v pdftotext >/dev/null || missing+=(poppler-utils)
command -v tesseract >/dev/null || missing+=(tesseract-ocr)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" python3-gdbm >/dev/null
  else
    echo "note: ${missing[*]} missing and not root: the tests that need them will skip" >&2
  fi
fi

# mongosh (and postal-mime) from npm, in the background: it takes as long as pip
npm_pid=
npm_log=$(mktemp)
trap 'rm -f "$npm_log"' EXIT
if [ ! -x node_modules/.bin/mongosh ]; then
  (
    cache="${AECS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aecs-mongo}/node_modules-$(sha256sum package-lock.json | cut -c1-16)"
    if [ -x "$cache/.bin/mongosh" ] && rm -rf node_modules && cp -a "$cache" node_modules; then
      echo "node_modules copied from $cache"
    else
      npm ci --no-audit --no-fund --silent
      # keep a copy for the next clone (written aside, then moved: never a half copy)
      if mkdir -p "$(dirname "$cache")" 2>/dev/null && cp -a node_modules "$cache.tmp.$$" 2>/dev/null; then
        mv -T "$cache.tmp.$$" "$cache" 2>/dev/null || rm -rf "$cache.tmp.$$"
      fi
    fi
  ) >"$npm_log" 2>&1 &
  npm_pid=$!
fi

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# (re)install only when pyproject.toml changed since the last install: the package itself is
# editable, so code changes need none, and pip's no-op run still costs seconds
stamp=.venv/.aecs-test-install
want="$(sha256sum pyproject.toml)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # --no-compile: Python compiles what the tests import when they import it; compiling every
  # installed file up front (about 2,900 of them) took a third of the install here
  # the docs extra (MkDocs) only here: the package's test extra stays what the tests need
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-compile -e '.[test,docs]'
  echo "$want" >"$stamp"
fi

# the manual, strictly, in the background while the checks below run (mypy leaves a core idle):
# a broken link or anchor, a page left out of the nav, a public name without a docstring or
# without its entry in docs/reference.md fails it (mkdocs.yml, docs/hooks.py)
# what every server and command the tests start imports, compiled once while the checks run
# (otherwise the first four workers, and their servers, would each compile it at once)
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.venv/bin/python -m compileall -q "$site"/secantus "$site"/pymongo "$site"/bson "$site"/gridfs aecs_mongo >/dev/null 2>&1 &
compile_pid=$!

# built from the docs extra alone, as a reader gets it (`pip install -e '.[docs]'`): a venv of
# its own inside .venv (git-ignored, outside the linters), so a module the API reference imports
# that the extra lacks fails here (the test extra would hide it)
docs_log=$(mktemp)
trap 'rm -f "$npm_log" "$docs_log"' EXIT
(
  docs_venv=.venv/docs
  docs_stamp=$docs_venv/.aecs-docs-install
  # CI builds from a new venv every run, as a reader's fresh `pip install -e '.[docs]'` gets
  # the extra's newest releases (a kept venv built the manual where a fresh one failed)
  [ "${CI:-}" != true ] || rm -rf "$docs_venv"
  if [ ! -f "$docs_stamp" ] || [ "$(cat "$docs_stamp")" != "$want" ]; then
    [ -x "$docs_venv/bin/python" ] || "$python" -m venv "$docs_venv"
    "$docs_venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile -e '.[docs]'
    echo "$want" >"$docs_stamp"
  fi
  NO_MKDOCS_2_WARNING=1 "$docs_venv/bin/mkdocs" build --strict --quiet
) >"$docs_log" 2>&1 &
docs_pid=$!

.venv/bin/python scripts/unasync.py --check
.venv/bin/python scripts/gen_indexes_js.py --check
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy --strict aecs_mongo
if ! wait "$docs_pid"; then
  cat "$docs_log" >&2
  echo "mkdocs build --strict failed" >&2
  exit 1
fi

wait "$compile_pid" || true

if [ -n "$npm_pid" ] && ! wait "$npm_pid"; then
  cat "$npm_log" >&2
  echo "npm ci failed" >&2
  exit 1
fi
echo "set-up and checks took ${SECONDS} s; now the tests" >&2
export MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING=1
export PATH="$PWD/node_modules/.bin:$PATH"

workers=(-n "${AECS_TEST_WORKERS:-$((2 * $(nproc)))}" --dist loadfile)
previous=
for arg in "$@"; do
  case "$arg" in
    -n | -n* | --numprocesses*) workers=() ;;
    no:xdist) [ "$previous" = -p ] && workers=() ;;
    -pno:xdist) workers=() ;;
  esac
  previous=$arg
done
.venv/bin/python -m pytest "${workers[@]}" "$@"
