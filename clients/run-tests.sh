#!/usr/bin/env bash
# Runs the Python and TypeScript client suites against a real `idemwatch serve`.
#
#   clients/run-tests.sh [IDEMWATCH_BINARY]      (default: $IDEMWATCH_BIN, else target/debug/idemwatch)
#
# Builds the packages as they ship (wheel + sdist with `python -m build`, a tarball with
# `npm pack`), installs them (the wheel with its test and framework extras into a venv;
# the tarball into a scratch app: it has no dependencies) and runs both suites against
# those installs. Each server
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

# The framework versions the adapters are tested with (docs/CLIENTS.md says so). The
# newest that run on Python 3.11 here; installed once into the venv (pip skips what is
# already there, so a warm venv costs seconds).
PY_FRAMEWORKS=(langchain-core==1.8.3 openai-agents==0.24.0 pydantic-ai-slim==2.78.0)
PY_TOOLS=(build==1.6.1 "setuptools>=61" wheel pytest==9.2.0 pytest-asyncio==1.5.0)

# Python: build the wheel and the sdist (python -m build), install the wheel with its
# extras as a user would, and run the suite against that install (not the source tree).
VENV=${IDEMWATCH_CLIENTS_VENV:-$ROOT/clients/python/.venv}
if [[ ! -x $VENV/bin/python ]]; then
  "${PYTHON:-python3}" -m venv "$VENV" || exit 2
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" "${PY_TOOLS[@]}" "${PY_FRAMEWORKS[@]}" || exit 2
"$VENV/bin/python" -m build --no-isolation --sdist --wheel --outdir "$WORK/dist" "$ROOT/clients/python" >"$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log" >&2; echo "clients: python -m build failed" >&2; exit 2; }
rm -rf "$ROOT/clients/python/build"
WHEEL=$(ls "$WORK"/dist/idemwatch-*.whl)
SDIST=$(ls "$WORK"/dist/idemwatch-*.tar.gz)
echo "clients: built $(basename "$WHEEL") and $(basename "$SDIST")"
"${PIP[@]}" "$WHEEL[test,langchain,openai-agents,pydantic-ai]" || exit 2
"${PIP[@]}" --no-deps --force-reinstall "$WHEEL" || exit 2
# The sdist installs too (into a scratch target: no dependencies, nothing replaced).
"${PIP[@]}" --no-deps --no-build-isolation --target "$WORK/sdist-check" "$SDIST" || { echo "clients: the sdist does not install" >&2; exit 2; }
export IDEMWATCH_PYTHON=$VENV/bin/python

# Node: npm pack, install the tarball into a scratch app, and run the suite from there
# against the installed package (its tests import "idemwatch", not ../src).
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if ((node_major < 20)); then
  echo "clients: Node >= 20 is required (found ${node_major})" >&2
  exit 2
fi
APP=$WORK/app
mkdir -p "$APP"
TARBALL=$(cd "$WORK" && npm pack --silent "$ROOT/clients/typescript") || { echo "clients: npm pack failed" >&2; exit 2; }
echo "clients: built $TARBALL"
(cd "$APP" && npm init -y >/dev/null && npm pkg set type=module && npm install --no-audit --no-fund --offline "$WORK/$TARBALL" >/dev/null &&
  node --input-type=module -e 'import { Client } from "idemwatch"; if (typeof Client !== "function") process.exit(1);') ||
  { echo "clients: npm install of $TARBALL failed" >&2; exit 2; }
# The frameworks the TypeScript adapters are tested with (docs/CLIENTS.md): ai 6.x, since
# ai 7 needs Node 22; openai 7.60 (a dependency of @openai/agents) declares Node 22 but runs
# the Runner on Node 20, which is all these tests use.
(cd "$APP" && npm install --no-audit --no-fund --silent @openai/agents@0.20.0 openai@7.60.0 ai@6.0.333 zod@4.6.7 >/dev/null 2>&1) ||
  { echo "clients: npm install of the TypeScript frameworks failed" >&2; exit 2; }
cp -r "$ROOT/clients/typescript/test" "$APP/test"
# The tests import the package by name; the two that test internals reach into it.
sed -i -e 's#"\.\./src/testing\.js"#"idemwatch/testing"#' -e 's#"\.\./src/adapters/\([a-z-]*\)\.js"#"idemwatch/adapters/\1"#' -e 's#"\(\.\./\)\{1,2\}src/index\.js"#"idemwatch"#' -e 's#"\.\./src/\([a-z/-]*\)\.js"#"../node_modules/idemwatch/src/\1.js"#' "$APP"/test/*.test.js "$APP"/test/support/*.js
export IDEMWATCH_REPO=$ROOT

status=0
echo
echo "=== Python client (pytest) ==="
(cd "$ROOT/clients/python" && "$VENV/bin/python" -m pytest -rs -p no:cacheprovider) 2>&1 | tee "$WORK/pytest.log"
py=${PIPESTATUS[0]}
((py == 0)) || status=1

echo
echo "=== TypeScript client (node --test) ==="
(cd "$APP" && node --test --test-reporter=spec test/*.test.js) 2>&1 | tee "$WORK/node.log"
js=${PIPESTATUS[0]}
((js == 0)) || status=1

echo
echo "=== Summary ==="
echo "python:     $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' "$WORK/pytest.log" | tail -1)"
echo "typescript: $(grep -E '^ℹ (tests|pass|fail|skipped|cancelled) ' "$WORK/node.log" | tr -d 'ℹ' | tr '\n' ' ')"
((status == 0)) && echo "clients: all passed" || echo "clients: FAILED (python exit $py, node exit $js)"
exit $status
