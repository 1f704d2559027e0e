"""The fault cases test_proxy.py and test_http.py do not already cover, counted at the
upstream (refund_server.py records every refund durably): a transport retry that resends
the same JSON-RPC request after its connection dropped, a re-issue under a new request id
that the attempt log tells apart, and issue 51's case through the proxy (other arguments
on a key whose outcome is UNKNOWN: a lookup or a person decides, nothing is resent)."""

import asyncio
import json
import socket
import urllib.request

import pytest

from test_http import proxy
from test_proxy import REFUND, guard_meta, payload, text

pytestmark = pytest.mark.anyio


class RawHost:
    """A host speaking Streamable HTTP by hand, so a request can be sent again with the
    same JSON-RPC id, as a transport retry after a dropped connection does."""

    def __init__(self, url):
        self.url = url
        self.session = None

    def post(self, message, timeout=30):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        request = urllib.request.Request(self.url, json.dumps(message).encode(), headers)
        with urllib.request.urlopen(request, timeout=timeout) as r:
            self.session = self.session or r.headers.get("Mcp-Session-Id")
            body = r.read().decode()
        for line in body.splitlines():
            if line.startswith("data:") and line[5:].strip():
                answer = json.loads(line[5:])
                if answer.get("id") == message.get("id"):
                    return answer
        return None

    def initialize(self):
        self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-host", "version": "1"}}})
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})


def refund_call(request_id, arguments):
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "issue_refund", "arguments": arguments}}


async def test_a_transport_retry_of_the_same_request_after_the_connection_dropped_runs_once(env):
    env.write_tools(timeout="5s")
    env.control(delay_s=1.5)
    with proxy(env) as url:
        host = RawHost(url)
        host.initialize()
        call = refund_call(7, REFUND)
        # The connection drops while the upstream is still working on the refund.
        with pytest.raises((TimeoutError, socket.timeout, OSError)):
            host.post(call, timeout=0.5)
        assert env.effects() == 1
        # The host's transport sends the very same request again: same id, same session.
        answer = await asyncio.to_thread(host.post, call)
    assert answer is not None and "result" in answer, answer
    result = answer["result"]
    assert not result.get("isError"), result
    # The first call's own answer (rmcp routes it to the stream of the resent id) or
    # the retry's replay, whichever is written first: the same refund either way.
    refund = result.get("structuredContent") or json.loads(result["content"][0]["text"])
    assert refund["refund_id"] == "rf_1", result
    assert env.effects() == 1
    kinds = [k for k, _, _ in env.attempts()]
    assert kinds.count("claimed") == 1 and "resent" not in kinds, kinds
    request_ids = {d["context"]["request_id"] for _, _, d in env.attempts()}
    assert request_ids == {"7"}, request_ids


async def test_a_reissue_with_a_new_request_id_replays_and_the_log_names_both_requests(env):
    async with env.host() as host:
        first = await host.call_tool("issue_refund", REFUND)
        again = await host.call_tool("issue_refund", {**REFUND, "reason": "asked again"})
    assert payload(again) == payload(first)
    assert guard_meta(again)["replayed"] is True
    assert env.effects() == 1
    rows = env.attempts()
    assert [k for k, _, _ in rows] == ["claimed", "completed", "replayed"], rows
    claimed, replayed = rows[0][2]["context"], rows[2][2]["context"]
    assert claimed["session_id"] == replayed["session_id"]
    assert claimed["request_id"] != replayed["request_id"]


async def unknown_first_call(env, host):
    """The first call carries pence read as pounds and times out after the upstream
    acted: its key is UNKNOWN with the wrong amount's effect at the provider."""
    first = await host.call_tool("issue_refund", {**REFUND, "amount_p": 450000})
    assert first.is_error and "UNKNOWN" in text(first), text(first)
    await asyncio.sleep(2)  # the slow refund lands at the provider
    env.control()
    assert env.effects() == 1
    return guard_meta(first)["key"]


async def test_other_arguments_on_an_unknown_key_look_the_effect_up_and_never_resend(env):
    env.write_tools(timeout="1s")
    env.control(delay_s=2.5)
    async with env.host() as host:
        key = await unknown_first_call(env, host)
        corrected = await host.call_tool("issue_refund", REFUND)
        # Asked again, the key is settled: the earlier refund is what happened.
        again = await host.call_tool("issue_refund", REFUND)
        status = await host.call_tool("idemwatch_status", {"key": key})
    said = text(corrected)
    assert corrected.is_error, said
    assert guard_meta(corrected)["key"] == key
    assert "amount_p" in said and "did happen" in said and "was not run" in said, said
    assert again.is_error and "amount_p" in text(again), text(again)
    assert payload(status)["status"] == "DONE"
    assert env.effects() == 1 and env.effects("A-88214") == 1
    kinds = [k for k, _, _ in env.attempts()]
    assert "resent" not in kinds and "taken_over" not in kinds, kinds
    assert kinds[2:] == ["payload_mismatch", "escalated", "reconciled_found", "payload_mismatch"], kinds


async def test_other_arguments_on_an_unknown_key_the_upstream_forgot_go_to_a_person(env):
    env.write_tools(timeout="1s")
    env.control(delay_s=2.5, forget_after_s=0.1)
    async with env.host("test-host", "--public-url", "https://idem.example") as host:
        key = await unknown_first_call(env, host)
        env.control(forget_after_s=0.1)
        corrected = await host.call_tool("issue_refund", REFUND)
        again = await host.call_tool("issue_refund", REFUND)
        status = await host.call_tool("idemwatch_status", {"key": key})
    said = text(corrected)
    assert corrected.is_error and "a person decides" in said and "amount_p" in said, said
    assert "may or may not have happened" in said, said
    assert f"https://idem.example/keys/{key}" in said
    assert again.is_error and "a person decides" in text(again), text(again)
    assert payload(status)["status"] == "UNKNOWN" and payload(status)["awaiting_person"] is True
    assert env.effects() == 1
    kinds = [k for k, _, _ in env.attempts()]
    assert "resent" not in kinds and "taken_over" not in kinds, kinds


async def test_other_arguments_on_an_unknown_key_without_a_lookup_wait_for_a_person(env):
    env.write_tools(timeout="1s")
    env.tools.write_text("\n".join(
        line for line in env.tools.read_text().splitlines() if not line.startswith("lookup =")))
    env.control(delay_s=2.5)
    async with env.host() as host:
        key = await unknown_first_call(env, host)
        corrected = await host.call_tool("issue_refund", REFUND)
    said = text(corrected)
    assert corrected.is_error and "a person decides" in said and "may or may not have happened" in said, said
    assert guard_meta(corrected)["key"] == key
    assert env.effects() == 1
    kinds = [k for k, _, _ in env.attempts()]
    assert kinds == ["claimed", "marked_unknown", "payload_mismatch", "escalated"], kinds

