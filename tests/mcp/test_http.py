"""`idemwatch mcp-proxy --listen` (Streamable HTTP) driven by the official Python SDK's
Streamable HTTP client; the same Host rules and bearer tokens as `serve`."""

import contextlib
import hashlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from conftest import BIN, HERE

pytestmark = pytest.mark.anyio

REFUND = {"order": "H-1", "amount_p": 700, "reason": "late"}
TOKEN = "iw_mcp_test_token_0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def proxy(env, *extra):
    port = free_port()
    process = subprocess.Popen(
        [BIN, "mcp-proxy", "--tools-file", str(env.tools), "--database-url", f"sqlite://{env.guard_db}?mode=rwc",
         "--listen", f"127.0.0.1:{port}", *extra, "--", sys.executable, str(HERE / "refund_server.py")],
        env={"REFUND_DB": str(env.refunds), "REFUND_CONTROL": str(env.control_file), "IDEMWATCH_LOG": "warn",
             "PATH": "/usr/bin:/bin"},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "the proxy exited at start"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline, "the proxy did not listen"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@contextlib.asynccontextmanager
async def host(url, token=None, name="http-host"):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, client_info=Implementation(name=name, version="1")) as s:
                await s.initialize()
                yield s


def post(url, headers):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json",
                                                  "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def test_two_http_sessions_share_one_refund_through_the_natural_key(env):
    with proxy(env) as url:
        async with host(url) as a:
            first = await a.call_tool("issue_refund", REFUND)
        async with host(url) as b:
            again = await b.call_tool("issue_refund", REFUND)
    assert not first.is_error, first
    assert (again.meta or {})["io.idemwatch/guard"]["replayed"] is True
    assert env.effects() == 1
    sessions = {d["context"]["session_id"] for _, _, d in env.attempts()}
    assert len(sessions) == 2, sessions


async def test_a_foreign_host_name_and_a_cross_site_origin_are_refused(env):
    with proxy(env) as url:
        assert post(url, {"Host": "rebound.example"}) == 421
        assert post(url, {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}) == 403
        assert post(url, {}) == 200


async def test_with_an_auth_file_only_a_worker_token_gets_in(env):
    auth = env.tmp / "auth.toml"
    auth.write_text(
        'mode = "builtin"\n'
        f'[[tokens]]\nname = "host"\nsha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\nroles = ["worker"]\n'
        f'[[tokens]]\nname = "reader"\nsha256 = "{hashlib.sha256(b"iw_reader_token_0123456789abcdef").hexdigest()}"\nroles = ["auditor"]\n'
    )
    with proxy(env, "--auth-file", str(auth)) as url:
        assert post(url, {}) == 401
        assert post(url, {"Authorization": "Bearer iw_wrong_token_0123456789abcdef"}) == 401
        assert post(url, {"Authorization": "Bearer iw_reader_token_0123456789abcdef"}) == 403
        async with host(url, TOKEN) as h:
            result = await h.call_tool("issue_refund", REFUND)
    assert not result.is_error
    assert env.effects() == 1


def test_a_non_loopback_address_without_an_auth_file_is_refused_at_start(env):
    started = subprocess.run(
        [BIN, "mcp-proxy", "--tools-file", str(env.tools), "--database-url", f"sqlite://{env.guard_db}?mode=rwc",
         "--listen", "0.0.0.0:0", "--", sys.executable, str(HERE / "refund_server.py")],
        capture_output=True, text=True, timeout=60, env={"REFUND_DB": str(env.refunds), "PATH": "/usr/bin:/bin"},
    )
    assert started.returncode != 0
    assert "without authentication" in started.stderr, started.stderr
