#!/usr/bin/env bash
# Runs the Python and TypeScript client suites against a real `idemwatch serve`.
#
#   clients/run-tests.sh [IDEMWATCH_BINARY]      (default: $IDEMWATCH_BIN, else target/debug/idemwatch)
#
# Installs what the clients need (the Python package with its test extras into a venv;
# nothing for Node, whose package has no dependencies) and runs both suites. Each server
# test runs on SQLite and on PostgreSQL:
#   - IDEMWATCH_TEST_PG_URL: a database to use as is;
#   - else TEST_DATABASE_URL (a server; the user may CREATE DATABASE): a fresh database on it;
#   - else, with initdb/pg_ctl installed, a throwaway cluster on a free loopback port;
#   - else PostgreSQL runs are skipped loudly (under CI=true they fail).
# Exits non-zero if either suite fails. Environment: IDEMWATCH_CLIENTS_VENV (default
# clients/python/.venv), PYTHON (default python3), PG_BIN.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

export IDEMWATCH_BIN=${1:-${IDEMWATCH_BIN:-$ROOT/target/debug/idemwatch}}
case $IDEMWATCH_BIN in /*) ;; *) IDEMWATCH_BIN=$ROOT/$IDEMWATCH_BIN ;; esac
if [[ ! -x $IDEMWATCH_BIN ]]; then
  echo "clients: no idemwatch binary at $IDEMWATCH_BIN (cargo build, or pass its path)" >&2
  exit 2
fi
echo "clients: server binary $IDEMWATCH_BIN"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemwatch-clients.XXXXXX")
TAG=clients
# shellcheck source=../scripts/lib/throwaway-pg.sh
source "$ROOT/scripts/lib/throwaway-pg.sh"
cleanup() {
  pg_cleanup
  rm -rf "$WORK"
}
trap cleanup EXIT
pg_find || exit 2
if [[ -z ${IDEMWATCH_TEST_PG_URL:-} ]]; then
  echo "clients: *** PostgreSQL unavailable: its runs are skipped${CI:+ (CI=$CI: they fail)} ***" >&2
fi

# Python: the package and its test extras, installed as a user would (not editable).
VENV=${IDEMWATCH_CLIENTS_VENV:-$ROOT/clients/python/.venv}
if [[ ! -x $VENV/bin/python ]]; then
  "${PYTHON:-python3}" -m venv "$VENV" || exit 2
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$ROOT/clients/python[test]" || exit 2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$ROOT/clients/python" || exit 2
export IDEMWATCH_PYTHON=$VENV/bin/python

# Node: the package installs with no dependencies and no build step.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if ((node_major < 20)); then
  echo "clients: Node >= 20 is required (found ${node_major})" >&2
  exit 2
fi
(cd "$WORK" && npm init -y >/dev/null && npm install --no-audit --no-fund --offline "$ROOT/clients/typescript" >/dev/null &&
  node --input-type=module -e 'import { Client } from "idemwatch"; if (typeof Client !== "function") process.exit(1);') ||
  { echo "clients: npm install ./clients/typescript failed" >&2; exit 2; }

status=0
echo
echo "=== Python client (pytest) ==="
(cd "$ROOT/clients/python" && "$VENV/bin/python" -m pytest -rs -p no:cacheprovider) 2>&1 | tee "$WORK/pytest.log"
py=${PIPESTATUS[0]}
((py == 0)) || status=1

echo
echo "=== TypeScript client (node --test) ==="
(cd "$ROOT/clients/typescript" && node --test --test-reporter=spec test/*.test.js) 2>&1 | tee "$WORK/node.log"
js=${PIPESTATUS[0]}
((js == 0)) || status=1

echo
echo "=== Summary ==="
echo "python:     $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' "$WORK/pytest.log" | tail -1)"
echo "typescript: $(grep -E '^ℹ (tests|pass|fail|skipped|cancelled) ' "$WORK/node.log" | tr -d 'ℹ' | tr '\n' ' ')"
((status == 0)) && echo "clients: all passed" || echo "clients: FAILED (python exit $py, node exit $js)"
exit $status
