"""Fixtures for the MCP proxy suite: a real `idemwatch mcp-proxy` (IDEMWATCH_BIN) in
front of the refund server (refund_server.py), both started by the official Python
SDK's stdio client, as a host starts them."""

import contextlib
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

HERE = Path(__file__).parent
BIN = os.environ.get("IDEMWATCH_BIN", str(HERE.parent.parent / "target" / "debug" / "idemwatch"))

TOOLS = (HERE / "tools.example.toml").read_text()


class Env:
    """One test's files: the tools file, the provider's database and control file, the
    guard's database."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.tools = tmp / "tools.toml"
        self.refunds = tmp / "refunds.db"
        self.control_file = tmp / "control.json"
        self.guard_db = tmp / "idemwatch.db"
        self.upstream_pid = tmp / "upstream.pid"
        self.proxy_pid = tmp / "proxy.pid"
        self.write_tools()

    def write_tools(self, timeout="2s", extra=""):
        self.tools.write_text(TOOLS.replace('call_timeout = "5s"', f'call_timeout = "{timeout}"') + extra)

    def control(self, **faults):
        self.control_file.write_text(json.dumps(faults))

    def effects(self, order=None):
        if not self.refunds.exists():
            return 0
        with contextlib.closing(sqlite3.connect(self.refunds)) as c:
            if order is None:
                return c.execute("SELECT COUNT(*) FROM refunds").fetchone()[0]
            return c.execute("SELECT COUNT(*) FROM refunds WHERE order_id = ?", (order,)).fetchone()[0]

    def attempts(self):
        """Every attempt row the guard wrote: (kind, actor, detail)."""
        with contextlib.closing(sqlite3.connect(self.guard_db)) as c:
            rows = c.execute("SELECT kind, actor, detail FROM idempotency_attempts ORDER BY id").fetchall()
        return [(k, a, json.loads(d)) for k, a, d in rows]

    def params(self, *extra_args):
        args = [
            "mcp-proxy",
            "--tools-file", str(self.tools),
            "--database-url", f"sqlite://{self.guard_db}?mode=rwc",
            "--lease-margin", "1s",
            *extra_args,
            "--", sys.executable, str(HERE / "refund_server.py"),
        ]
        # The proxy's pid, for the tests that kill it: `exec` keeps it.
        script = 'echo $$ > "$PROXY_PIDFILE"; exec "$@"'
        return StdioServerParameters(
            command="/bin/sh",
            args=["-c", script, "sh", BIN, *args],
            env={
                "REFUND_DB": str(self.refunds),
                "REFUND_CONTROL": str(self.control_file),
                "REFUND_PIDFILE": str(self.upstream_pid),
                "PROXY_PIDFILE": str(self.proxy_pid),
                "IDEMWATCH_LOG": "warn",
                "PATH": os.environ.get("PATH", ""),
            },
        )

    @contextlib.asynccontextmanager
    async def host(self, name="test-host", *extra_args):
        """A host session through a fresh proxy process."""
        async with stdio_client(self.params(*extra_args)) as (read, write):
            async with ClientSession(read, write, client_info=Implementation(name=name, version="1")) as s:
                await s.initialize()
                yield s

    def kill(self, pidfile):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.fixture
def env(tmp_path):
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"no idemwatch binary at {BIN} (cargo build, or set IDEMWATCH_BIN)")
    return Env(tmp_path)


@pytest.fixture
def anyio_backend():
    return "asyncio"
