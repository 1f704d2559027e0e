"""`mcp-proxy --guard-url`: several proxies, one guard. A real `idemwatch serve` (SQLite,
an auth file, a worker token) is the guard; two proxies go through its guard API in
front of the same upstream (the refund server over Streamable HTTP), each driven by the
official Python SDK's client. Effects are counted at the upstream."""

import asyncio
import contextlib
import json
import os
import subprocess
import urllib.request

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

from conftest import BIN
from processes import http_upstream, serve, worker_auth_file

pytestmark = pytest.mark.anyio

TOKEN = "iw_mcp_proxies_worker_0123456789abcdef"
READER = "iw_mcp_proxies_auditor_0123456789abcdef"
REFUND = {"order": "G-7", "amount_p": 1200, "reason": "broken"}


def auth(env):
    return worker_auth_file(env.tmp / "auth.toml", {TOKEN: ("proxies", ["worker"]), READER: ("audit", ["auditor"])})


def proxy_args(env, guard, upstream, *extra):
    return ["mcp-proxy", "--tools-file", str(env.tools), "--guard-url", guard, "--upstream-url", f"{upstream}/mcp",
            *extra]


def through_args(env, guard, upstream, through):
    """The proxy's arguments through serve (its guard API), or on serve's database."""
    args = proxy_args(env, guard, upstream, *(["--guard-token", TOKEN] if through == "serve" else []))
    if through == "database":
        at = args.index("--guard-url")
        args[at:at + 2] = ["--database-url", f"sqlite://{env.guard_db}?mode=rwc"]
    return args


@contextlib.asynccontextmanager
async def host(env, guard, upstream, name, *extra, proxy_env=None, errlog=None, args=None):
    params = StdioServerParameters(
        command=BIN, args=args or proxy_args(env, guard, upstream, *extra),
        env={"IDEMWATCH_LOG": "warn", "PATH": os.environ.get("PATH", ""), **(proxy_env or {})})
    async with stdio_client(params, **({"errlog": errlog} if errlog else {})) as (read, write):
        async with ClientSession(read, write, client_info=Implementation(name=name, version="1")) as s:
            await s.initialize()
            yield s


def key_state(guard, key):
    request = urllib.request.Request(f"{guard}/api/v1/guard/keys/{key}?attempts_after=0",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.load(r)


async def test_two_proxies_through_one_serve_make_one_effect(env):
    token_file = env.tmp / "guard-token"
    token_file.write_text(TOKEN + "\n")
    with http_upstream(env) as upstream, serve(env, auth(env)) as guard:
        # Two proxies at once, as two hosts (or two replicas of one) would run them: one
        # reads the token from a file, the other from the environment.
        async with host(env, guard, upstream, "desk-a", "--guard-token-file", str(token_file)) as a, \
                host(env, guard, upstream, "desk-b", proxy_env={"IDEMWATCH_GUARD_TOKEN": TOKEN}) as b:
            first = await a.call_tool("issue_refund", REFUND)
            # The same action through the other proxy, the model's wording changed: the
            # natural key (order) is the same, so serve replays it.
            again = await b.call_tool("issue_refund", {**REFUND, "reason": "it arrived broken"})
            other = await b.call_tool("issue_refund", {**REFUND, "order": "G-8"})
            status = await b.call_tool("idemwatch_status", {"tool": "issue_refund", "arguments": REFUND})
            mismatch = await a.call_tool("issue_refund", {**REFUND, "amount_p": 1300})
        key = first.meta["io.idemwatch/guard"]["key"] if first.meta else again.meta["io.idemwatch/guard"]["key"]
        state = key_state(guard, key)
    assert not first.is_error, first
    assert again.meta["io.idemwatch/guard"] == {"key": key, "decision": "replay", "replayed": True}
    assert not other.is_error, other
    assert env.effects("G-7") == 1 and env.effects("G-8") == 1
    assert status.structured_content["status"] == "DONE" and status.structured_content["key"] == key
    assert mismatch.is_error and "differing: amount_p" in mismatch.content[0].text, mismatch
    assert mismatch.meta["io.idemwatch/guard"]["decision"] == "payload_mismatch"
    assert state["status"] == "DONE"
    # serve records the token's identity, then the worker id the proxy sends.
    actors = [a["actor"] for a in state["attempts"]]
    assert actors[0] == "token:proxies/mcp:desk-a", actors
    assert "token:proxies/mcp:desk-b" in actors, actors


@pytest.mark.parametrize("through", ["serve", "database"])
async def test_the_session_and_request_ids_reach_the_attempt_log_through_either_guard(env, through):
    # The same call through serve's guard API (the proxy sends them as `context`) and
    # through the in-process guard: the same `detail.context` on every row, read back
    # from serve's JSON API for the key.
    with http_upstream(env) as upstream, serve(env, auth(env)) as guard:
        async with host(env, guard, upstream, "desk-ctx", args=through_args(env, guard, upstream, through)) as h:
            first = await h.call_tool("issue_refund", REFUND)
            again = await h.call_tool("issue_refund", REFUND)
        key = first.meta["io.idemwatch/guard"]["key"] if first.meta else again.meta["io.idemwatch/guard"]["key"]
        state = key_state(guard, key)
    assert not first.is_error, first
    assert again.meta["io.idemwatch/guard"]["replayed"] is True
    rows = [(a["kind"], a["detail"].get("context")) for a in state["attempts"]]
    assert [k for k, _ in rows] == ["claimed", "completed", "replayed"], rows
    contexts = [c for _, c in rows]
    assert all(c and set(c) == {"session_id", "request_id", "client"} for c in contexts), rows
    assert {c["client"] for c in contexts} == {"desk-ctx"}
    # One stdio session; the claim and the settle are one JSON-RPC request, the replay another.
    assert len({c["session_id"] for c in contexts}) == 1 and contexts[0]["session_id"].startswith("stdio-")
    assert contexts[0]["request_id"] == contexts[1]["request_id"] != contexts[2]["request_id"], rows


async def test_a_429_from_the_guard_is_waited_out_by_its_retry_after(env):
    errors = env.tmp / "proxy.log"
    with http_upstream(env) as upstream, serve(env, auth(env), "--guard-rate-per-token", "1") as guard, \
            errors.open("w") as errlog:
        # One request a second for this token: the start-up check, the admit and the
        # settle cannot all pass at once.
        async with host(env, guard, upstream, "slow-desk", "--guard-token", TOKEN,
                        proxy_env={"IDEMWATCH_LOG": "info"}, errlog=errlog) as h:
            result = await h.call_tool("issue_refund", REFUND)
            replay = await h.call_tool("issue_refund", REFUND)
    assert not result.is_error, result
    assert replay.meta["io.idemwatch/guard"]["replayed"] is True
    assert env.effects() == 1
    assert "the guard asked to retry later" in errors.read_text()


@pytest.mark.parametrize("token, message", [
    ("iw_wrong_token_0123456789abcdef0000", "refused the token (401"),
    (READER, "may not call the guard (403"),
])
def test_a_token_the_guard_refuses_stops_the_proxy_at_start(env, token, message):
    with http_upstream(env) as upstream, serve(env, auth(env)) as guard:
        started = subprocess.run([BIN, *proxy_args(env, guard, upstream, "--guard-token", token)],
                                 capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert started.returncode == 1
    assert message in started.stderr and "--guard-token" in started.stderr, started.stderr
    assert token not in started.stderr
    assert env.effects() == 0


def test_guard_url_and_database_url_are_one_or_the_other(env):
    started = subprocess.run([BIN, *proxy_args(env, "http://127.0.0.1:9", "http://127.0.0.1:9", "--database-url",
                                               "sqlite://x.db")], capture_output=True, text=True, timeout=60)
    assert started.returncode == 2
    assert "'--guard-url <GUARD_URL>' cannot be used with '--database-url" in started.stderr, started.stderr


@pytest.mark.parametrize("through", ["serve", "database"])
async def test_a_forgotten_key_waits_for_a_person_and_the_status_tool_says_so(env, through):
    # The upstream answers after the call timeout and forgets keys after 0.5 s; past
    # the tool's 2 s retention a resend could pay twice, so a person decides.
    env.write_tools(timeout="1s")
    env.tools.write_text(env.tools.read_text().replace('key_retention = "24h"', 'key_retention = "2s"'))
    env.control(delay_s=1.5, forget_after_s=0.5)
    with http_upstream(env) as upstream, serve(env, auth(env)) as guard:
        params = StdioServerParameters(command=BIN, args=through_args(env, guard, upstream, through),
                                       env={"IDEMWATCH_LOG": "warn", "PATH": os.environ.get("PATH", "")})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, client_info=Implementation(name="desk", version="1")) as h:
                await h.initialize()
                first = await h.call_tool("issue_refund", REFUND)
                await asyncio.sleep(2.5)
                again = await h.call_tool("issue_refund", REFUND)
                key = first.meta["io.idemwatch/guard"]["key"]
                status = await h.call_tool("idemwatch_status", {"key": key})
    assert first.is_error and "UNKNOWN" in first.content[0].text, first
    assert again.is_error and "a person decides" in again.content[0].text, again
    assert status.structured_content["status"] == "UNKNOWN"
    assert status.structured_content["awaiting_person"] is True, status.structured_content
    assert "A person decides" in status.structured_content["next"]
    assert env.effects() == 1
