#!/usr/bin/env bash
# Runs the MCP proxy suite: a real `idemwatch mcp-proxy` between the official Python
# SDK's client and an upstream written with the same SDK (docs/MCP.md, "Tests").
#
#   tests/mcp/run-tests.sh [IDEMWATCH_BINARY]   (default: $IDEMWATCH_BIN, else target/debug/idemwatch)
#
# Installs the pinned packages (requirements.txt) into a venv (IDEMWATCH_MCP_VENV,
# default tests/mcp/.venv) and the TypeScript SDK (ts/package.json) with npm. Without
# Python, Node 20 or the packages the suite is skipped loudly; under CI=true that fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

export IDEMWATCH_BIN=${1:-${IDEMWATCH_BIN:-$ROOT/target/debug/idemwatch}}
case $IDEMWATCH_BIN in /*) ;; *) IDEMWATCH_BIN=$ROOT/$IDEMWATCH_BIN ;; esac
if [[ ! -x $IDEMWATCH_BIN ]]; then
  echo "mcp: no idemwatch binary at $IDEMWATCH_BIN (cargo build, or pass its path)" >&2
  exit 2
fi

skip() {
  echo "mcp: *** $1: the MCP proxy suite is SKIPPED${CI:+ (CI=$CI: it fails)} ***" >&2
  [[ ${CI:-} == true ]] && exit 2
  exit 0
}

PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || skip "no $PYTHON"
VENV=${IDEMWATCH_MCP_VENV:-$ROOT/tests/mcp/.venv}
if [[ ! -x $VENV/bin/python ]]; then
  "$PYTHON" -m venv "$VENV" || skip "cannot create a venv with $PYTHON"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$ROOT/tests/mcp/requirements.txt" ||
  skip "cannot install tests/mcp/requirements.txt"

# Node: the official TypeScript SDK's client, pinned in tests/mcp/ts/package.json.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
((node_major >= 20)) || skip "Node >= 20 is required (found ${node_major})"
(cd "$ROOT/tests/mcp/ts" && npm install --no-audit --no-fund --silent) || skip "cannot npm install tests/mcp/ts"

status=0
echo "=== MCP proxy: Python SDK client and upstream (pytest) ==="
(cd "$ROOT/tests/mcp" && "$VENV/bin/python" -m pytest -rs -p no:cacheprovider) || status=1
echo "=== MCP proxy: TypeScript SDK client (node --test) ==="
(cd "$ROOT/tests/mcp/ts" && IDEMWATCH_MCP_PYTHON=$VENV/bin/python node --test --test-reporter=spec proxy.test.mjs) || status=1
((status == 0)) && echo "mcp: all passed" || echo "mcp: FAILED"
exit $status
