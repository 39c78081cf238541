#!/usr/bin/env bash
# Real-client compatibility suites for Settee: PouchDB (node) and
# couchdb-python (pytest). Each suite starts its own settee server on a
# fresh temp data dir and a free port, and stops it at the end.
#
#   tests/clients/run.sh
#
# Env: SETTEE_BIN  settee binary (default: the workspace's target/release/settee)
#      PYTHON      python interpreter to use (default python3)
#      SKIP_INSTALL=1  skip `npm ci` / `pip install`
# Exits non-zero if installing fails or any test fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

export SETTEE_BIN="${SETTEE_BIN:-$here/../../target/release/settee}"
PYTHON="${PYTHON:-python3}"

if [[ -z "${SETTEE_URL:-}" && ! -x "$SETTEE_BIN" ]]; then
  echo "run.sh: settee binary not found or not executable: $SETTEE_BIN" >&2
  echo "run.sh: build it (cargo build --release) or set SETTEE_BIN" >&2
  exit 2
fi

if [[ "${SKIP_INSTALL:-0}" != "1" ]]; then
  echo "== installing client test dependencies"
  npm ci --no-audit --no-fund --loglevel=error
  "$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements.txt
fi

status=0

echo "== PouchDB suite (node --test)"
if ! node --test pouchdb.test.mjs; then
  echo "run.sh: PouchDB suite FAILED" >&2
  status=1
fi

echo "== couchdb-python suite (pytest)"
if ! "$PYTHON" -m pytest -q -p no:cacheprovider test_couchdb_python.py; then
  echo "run.sh: couchdb-python suite FAILED" >&2
  status=1
fi

if [[ $status -eq 0 ]]; then
  echo "run.sh: all client suites passed"
fi
exit $status
