"""`mcp-proxy --upstream-url`: the upstream over Streamable HTTP (refund_server_http.py,
the same refund provider served by the official Python SDK's own HTTP transport),
driven through the proxy by the Python SDK's stdio client. Effects are counted at the
upstream."""

import contextlib
import json
import os
import sqlite3
import subprocess

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

from conftest import BIN
from processes import http_upstream

pytestmark = pytest.mark.anyio

REFUND = {"order": "U-1", "amount_p": 900, "reason": "damaged"}
UPSTREAM_TOKEN = "upstream-secret-0123456789"


def body(result):
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def proxy_args(env, *extra):
    return ["mcp-proxy", "--tools-file", str(env.tools), "--database-url", f"sqlite://{env.guard_db}?mode=rwc",
            "--lease-margin", "1s", *extra]


@contextlib.asynccontextmanager
async def host(env, *extra, name="url-host"):
    params = StdioServerParameters(command=BIN, args=proxy_args(env, *extra),
                                   env={"IDEMWATCH_LOG": "warn", "PATH": os.environ.get("PATH", "")})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, client_info=Implementation(name=name, version="1")) as s:
            await s.initialize()
            yield s


async def test_a_streamable_http_upstream_is_guarded_like_a_command(env):
    with http_upstream(env) as base:
        url = f"{base}/mcp"
        async with host(env, "--upstream-url", url) as h:
            tools = {t.name for t in (await h.list_tools()).tools}
            first = await h.call_tool("issue_refund", REFUND)
            retry = await h.call_tool("issue_refund", REFUND)
            order = await h.call_tool("get_order", {"order": "U-1"})
        # A restarted host re-issues the refund: the natural key holds across sessions.
        async with host(env, "--upstream-url", url, name="url-host-2") as h:
            reissued = await h.call_tool("issue_refund", {**REFUND, "reason": "damaged, again"})
    assert {"issue_refund", "find_refund", "idemwatch_status"} <= tools
    assert not first.is_error, first
    assert body(first)["order"] == "U-1"
    assert retry.meta["io.idemwatch/guard"]["replayed"] is True
    assert reissued.meta["io.idemwatch/guard"]["replayed"] is True
    assert body(order)["refunds"] == 1
    assert env.effects() == 1
    # The key went to the upstream in key_argument: the provider recorded it.
    key = retry.meta["io.idemwatch/guard"]["key"]
    with contextlib.closing(sqlite3.connect(env.refunds)) as c:
        assert c.execute("SELECT idempotency_key FROM refunds").fetchone()[0] == key


async def test_upstream_headers_carry_the_bearer_token_a_remote_server_needs(env):
    with http_upstream(env, token=UPSTREAM_TOKEN) as base:
        url = f"{base}/mcp"
        async with host(env, "--upstream-url", url, "--upstream-header", f"Authorization: Bearer {UPSTREAM_TOKEN}") as h:
            result = await h.call_tool("issue_refund", REFUND)
        assert not result.is_error, result
        # Without the header the upstream answers 401 and the proxy refuses to start.
        refused = subprocess.run([BIN, *proxy_args(env, "--upstream-url", url)], capture_output=True, text=True,
                                 timeout=60, stdin=subprocess.DEVNULL)
    assert env.effects() == 1
    assert refused.returncode == 1
    assert "did not complete initialize" in refused.stderr and "401" in refused.stderr, refused.stderr
    assert UPSTREAM_TOKEN not in refused.stderr


@pytest.mark.parametrize("argv, message", [
    (["--upstream-url", "http://127.0.0.1:9/mcp", "--", "python3", "x.py"], "cannot be used with"),
    ([], "required arguments were not provided"),
    (["--upstream-url", "http://127.0.0.1:9/mcp", "--upstream-ca-file", "ca.pem"], "is for an https:// server"),
    (["--upstream-ca-file", "ca.pem", "--", "python3", "x.py"], "--upstream-url"),
    (["--upstream-url", "http://127.0.0.1:9/mcp", "--upstream-header", "no colon"], "is not `Name: value`"),
    (["--upstream-url", "http://127.0.0.1:9/mcp", "--upstream-header", "Mcp-Session-Id: x"], "set by the MCP transport"),
    (["--upstream-header", "X-A: b", "--", "python3", "x.py"], "--upstream-url"),
])
def test_the_upstream_is_exactly_one_of_a_url_and_a_command(env, argv, message):
    started = subprocess.run([BIN, *proxy_args(env, *argv)], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    assert started.returncode != 0
    assert message in started.stderr, started.stderr
    assert "panicked" not in started.stderr
