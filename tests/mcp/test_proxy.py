"""`idemwatch mcp-proxy` against the official Python SDK on both sides (client and a
FastMCP/MCPServer upstream), over stdio. Every test counts effects at the upstream:
exactly one per action."""

import asyncio
import json
import time

import pytest

pytestmark = pytest.mark.anyio

REFUND = {"order": "A-88214", "amount_p": 4500, "reason": "arrived late"}


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def payload(result):
    """The tool's JSON answer: its structured content, or its first text block."""
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def guard_meta(result):
    return (result.meta or {}).get("io.idemwatch/guard", {})


async def test_tools_list_passes_the_upstream_tools_through_and_adds_the_status_tool(env):
    async with env.host() as host:
        tools = {t.name: t for t in (await host.list_tools()).tools}
    assert set(tools) == {"issue_refund", "find_refund", "get_order", "cancel_order", "send_note", "idemwatch_status"}
    assert tools["issue_refund"].annotations.destructive_hint is True
    assert tools["get_order"].annotations.read_only_hint is True
    assert tools["idemwatch_status"].annotations.read_only_hint is True


async def test_a_transport_retry_of_the_same_call_replays_the_first_result(env):
    async with env.host() as host:
        first = await host.call_tool("issue_refund", REFUND)
        again = await host.call_tool("issue_refund", REFUND)
    assert not first.is_error, text(first)
    assert payload(first)["refund_id"] == "rf_1"
    assert payload(again) == payload(first)
    assert guard_meta(again)["replayed"] is True
    assert "no new effect happened" in text(again)
    assert env.effects() == 1


async def test_a_reissue_in_a_new_session_collapses_on_the_natural_key(env):
    async with env.host() as host:
        first = await host.call_tool("issue_refund", REFUND)
    # The host restarted: a new session, a new request id, the reason rephrased.
    async with env.host() as host:
        again = await host.call_tool("issue_refund", {**REFUND, "reason": "the parcel never came"})
    assert payload(again) == payload(first)
    assert guard_meta(again)["replayed"] is True
    assert env.effects() == 1


async def test_a_genuine_second_refund_for_another_order_goes_through(env):
    async with env.host() as host:
        a = await host.call_tool("issue_refund", REFUND)
        b = await host.call_tool("issue_refund", {**REFUND, "order": "B-1"})
    assert payload(a)["refund_id"] != payload(b)["refund_id"]
    assert env.effects("A-88214") == 1 and env.effects("B-1") == 1


async def test_the_same_action_with_other_arguments_is_refused_naming_the_fields(env):
    async with env.host() as host:
        await host.call_tool("issue_refund", REFUND)
        other = await host.call_tool("issue_refund", {**REFUND, "amount_p": 9999})
        # The host's own idempotencyKey (SEP-3182), reused for other arguments.
        keyed = {"order": "C-1", "amount_p": 100}
        await host.call_tool("issue_refund", keyed, meta={"idempotencyKey": "host-key-1"})
        # Another order: only the host's key makes it the same action.
        reused = await host.call_tool("issue_refund", {**keyed, "order": "C-2"}, meta={"idempotencyKey": "host-key-1"})
    assert other.is_error and "amount_p" in text(other)
    assert guard_meta(other)["decision"] == "payload_mismatch"
    assert reused.is_error and "differing: order" in text(reused), text(reused)
    assert env.effects("A-88214") == 1 and env.effects("C-1") == 1 and env.effects("C-2") == 0


async def test_read_only_tools_pass_through_and_unclassified_or_contradicted_tools_are_refused(env):
    async with env.host() as host:
        order = await host.call_tool("get_order", {"order": "A-88214"})
        cancel = await host.call_tool("cancel_order", {"order": "A-88214"})
        note = await host.call_tool("send_note", {"order": "A-88214", "text": "hi"})
        overview = await host.call_tool("idemwatch_status", {})
    assert not order.is_error and payload(order)["refunds"] == 0
    assert cancel.is_error and "destructive" in text(cancel)
    assert note.is_error and str(env.tools) in text(note)
    disagreements = payload(overview)["annotation_disagreements"]
    assert {(d["tool"], d["annotation"]) for d in disagreements} == {
        ("cancel_order", "readOnlyHint"),
        ("cancel_order", "destructiveHint"),
    }
    assert env.attempts() == []  # nothing guarded was called


async def test_a_timeout_is_unknown_then_the_lookup_finds_the_effect_and_nothing_is_resent(env):
    env.write_tools(timeout="1s")
    env.control(delay_s=2.5)
    async with env.host() as host:
        first = await host.call_tool("issue_refund", REFUND)
        assert first.is_error
        key = guard_meta(first)["key"]
        assert "UNKNOWN" in text(first) and "may have happened" in text(first) and key in text(first)
        status = await host.call_tool("idemwatch_status", {"key": key})
        assert payload(status)["status"] == "UNKNOWN"
        env.control()
        await asyncio.sleep(2)  # the slow call finishes at the provider
        again = await host.call_tool("issue_refund", REFUND)
    assert not again.is_error, text(again)
    assert payload(again) == {"refund_id": "rf_1", "order": "A-88214", "amount_p": 4500}
    assert guard_meta(again)["replayed"] is True
    assert env.effects() == 1
    kinds = [k for k, _, _ in env.attempts()]
    assert kinds == ["claimed", "marked_unknown", "taken_over", "reconciled_found"], kinds
    _, actor, detail = env.attempts()[0]
    assert actor == "mcp:test-host"
    assert detail["context"]["session_id"].startswith("stdio-") and detail["context"]["request_id"]


async def test_a_key_the_upstream_forgot_goes_to_a_person_and_is_never_resent(env):
    env.write_tools(timeout="1s")
    env.tools.write_text(env.tools.read_text().replace('key_retention = "24h"', 'key_retention = "2s"'))
    env.control(delay_s=1.5, forget_after_s=0.5)
    async with env.host("test-host", "--public-url", "https://idem.example") as host:
        first = await host.call_tool("issue_refund", REFUND)
        assert first.is_error and "UNKNOWN" in text(first)
        await asyncio.sleep(2.5)  # past the provider's retention: a resend could pay twice
        again = await host.call_tool("issue_refund", REFUND)
    key = guard_meta(first)["key"]
    assert again.is_error and "a person decides" in text(again)
    assert f"https://idem.example/keys/{key}" in text(again)
    assert env.effects() == 1
    assert [k for k, _, _ in env.attempts()][-1] == "escalated"


async def test_the_proxy_killed_mid_call_and_restarted_does_not_refund_twice(env):
    env.write_tools(timeout="3s")
    env.control(delay_s=2)

    async def call_and_die():
        async with env.host() as host:
            await host.call_tool("issue_refund", REFUND)

    task = asyncio.create_task(call_and_die())
    deadline = time.monotonic() + 20
    while env.effects() == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    env.kill(env.proxy_pid)
    with pytest.raises(BaseException):
        await asyncio.wait_for(task, 10)
    env.control()
    await asyncio.sleep(2.5)  # the orphaned upstream call finishes
    async with env.host() as host:
        # In flight under the dead proxy's lease: the new proxy waits for it to run
        # out, takes the key over and finds the effect.
        again = await host.call_tool("issue_refund", REFUND)
        if again.is_error:  # the lease outlived the wait: ask again, as told
            assert "still running" in text(again)
            await asyncio.sleep(2)
            again = await host.call_tool("issue_refund", REFUND)
    assert not again.is_error, text(again)
    assert guard_meta(again)["replayed"] is True
    assert env.effects() == 1


async def test_the_upstream_killed_mid_call_is_unknown_then_reconciled(env):
    env.write_tools(timeout="5s")
    env.control(delay_s=3)
    async with env.host() as host:
        call = asyncio.create_task(host.call_tool("issue_refund", REFUND))
        deadline = time.monotonic() + 20
        while env.effects() == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        env.kill(env.upstream_pid)
        first = await call
        assert first.is_error and "UNKNOWN" in text(first), text(first)
        env.control()
        again = await host.call_tool("issue_refund", REFUND)
    assert not again.is_error, text(again)
    assert guard_meta(again)["replayed"] is True
    assert env.effects() == 1
