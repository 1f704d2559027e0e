"""The trial of issue 49 as a test: a scripted model re-issues a refund a few turns later,
hits a timeout, asks for the status, and asks for a genuine second refund. With the
intent derived from the run and the business object (``AgentTool``) the provider sees
exactly the intended effects."""

from __future__ import annotations

import uuid

import idemwatch
from conftest import Server
from fake_provider import FakeProvider
from refunds import async_refund_tool, refund_tool

TOOL = "agent_refund"  # natural_key = ["order", "refund_no"] (clients/testdata/tools.toml)


def _tools(client: idemwatch.Client, provider: FakeProvider) -> tuple[idemwatch.AgentTool, idemwatch.StatusTool]:
    refund = idemwatch.AgentTool(
        refund_tool(client, provider.url, name=TOOL),
        object_fields=["order"],
        action="the refund",
        number_field="refund_no",
    )
    return refund, idemwatch.StatusTool(client, [refund])


def test_a_reissued_call_collapses_and_a_declared_second_refund_goes_through(
    client: idemwatch.Client, provider: FakeProvider
) -> None:
    refund, status = _tools(client, provider)
    order = f"A-{uuid.uuid4().hex[:8]}"
    run = idemwatch.Run(tenant="acme", run_id=f"run-{uuid.uuid4().hex[:8]}")
    args = {"order": order, "amount_p": 4500, "reason": "arrived late"}

    # Turn 1: the provider acts, then answers past the 1 s call timeout.
    provider.fail_next("delay", seconds=2.5)
    first = refund.call(run, args)
    assert first["status"] == "unknown" and first["key"]
    assert "same request is safe" in first["next"]

    # Turn 2: the model checks the status it was told to check.
    asked = status.ask(run, tool=TOOL, args={"order": order})
    assert asked["status"] == "UNKNOWN" and asked["actions"][0]["key"] == first["key"]

    # Turn 3: the model re-issues the call, reworded: the same key, reconciled, no resend.
    again = refund.call(run, {**args, "reason": "the parcel came four days late"})
    assert again["status"] == "replayed" and again["key"] == first["key"]

    # Turn 4: a re-planned run (another run id) asks for the same refund: the natural key
    # answers from the first; with another amount it is refused and told what exists.
    replanned = idemwatch.Run(tenant="acme", run_id=f"run-{uuid.uuid4().hex[:8]}")
    assert refund.call(replanned, args)["status"] == "replayed"
    refused = refund.call(replanned, {**args, "amount_p": 3000})
    assert refused["status"] == "already_requested", refused
    assert refused["key"] == first["key"] and refused["existing_status"] == "DONE"
    assert refused["result"]["refund_id"] == provider.effects[0]["refund_id"]
    assert "approves" in refused["next"]
    assert len(provider.effects) == 1

    # Turn 5: a person approves a second refund; the harness declares it.
    approved = idemwatch.Run(
        tenant=run.tenant,
        run_id=run.run_id,
        approvals={f"order:{order}": idemwatch.Approval(2, "second item also damaged", "ops:maria")},
    )
    second = refund.call(approved, {**args, "amount_p": 3000})
    assert second["status"] == "done" and second["key"] != first["key"]
    # ...and its own re-issue collapses too.
    assert refund.call(approved, {**args, "amount_p": 3000})["status"] == "replayed"

    asked = status.ask(run, tool=TOOL, args={"order": order})
    assert [a["status"] for a in asked["actions"]] == ["DONE", "DONE"]
    assert len(provider.effects) == 2, "two refunds intended, two made"


def test_the_status_tool_says_when_nothing_was_attempted(
    client: idemwatch.Client, provider: FakeProvider
) -> None:
    _, status = _tools(client, provider)
    run = idemwatch.Run(tenant="acme", run_id="run-none")
    asked = status.ask(run, tool=TOOL, args={"order": f"A-{uuid.uuid4().hex[:8]}"})
    assert asked["status"] == "none" and "did not happen" in asked["next"]
    assert status.ask(run, tool="nope", args={})["status"] == "error"


async def test_the_async_status_tool_answers_from_the_asyncio_client(
    server: Server, provider: FakeProvider
) -> None:
    async with idemwatch.AsyncClient(server.url, worker="async-agent") as client:
        refund = idemwatch.AgentTool(
            async_refund_tool(client, provider.url, name=TOOL),
            object_fields=["order"],
            action="the refund",
            number_field="refund_no",
        )
        status = idemwatch.StatusTool(client, [refund])
        order = f"A-{uuid.uuid4().hex[:8]}"
        run = idemwatch.Run(tenant="acme", run_id=f"run-{uuid.uuid4().hex[:8]}")
        before = await status.aask(run, tool=TOOL, args={"order": order})
        assert before["status"] == "none" and "did not happen" in before["next"]

        done = await refund.acall(run, {"order": order, "amount_p": 4500})
        assert done["status"] == "done", done
        asked = await status.aask(run, tool=TOOL, args={"order": order})
        assert asked["status"] == "DONE" and asked["actions"][0]["key"] == done["key"]
        by_key = await status.aask(run, key=done["key"], tool=TOOL)
        assert by_key["status"] == "DONE" and by_key["actions"][0]["key"] == done["key"]
        assert (await status.aask(run, tool="nope", args={}))["status"] == "error"
    assert provider.calls == 1


def test_the_keys_of_a_run_are_listed_for_a_worker(
    client: idemwatch.Client, provider: FakeProvider, server: Server
) -> None:
    refund, _ = _tools(client, provider)
    run = idemwatch.Run(tenant="acme", run_id=f"run-{uuid.uuid4().hex[:8]}")
    for n in range(3):
        refund.call(run, {"order": f"A-{uuid.uuid4().hex[:8]}", "amount_p": 100 + n})
    listed = client.list_keys(workflow_id=run.run_id)
    assert len(listed) == 3 and {k["status"] for k in listed} == {"DONE"}
    assert len(client.list_keys(workflow_id=run.run_id, limit=2)) == 2


def test_a_guard_that_cannot_be_reached_is_not_attempted_not_unknown(provider: FakeProvider) -> None:
    from conftest import free_port

    dead = idemwatch.Client(f"http://127.0.0.1:{free_port()}", timeout=2)
    refund = idemwatch.AgentTool(
        refund_tool(dead, provider.url, name=TOOL), object_fields=["order"], action="the refund"
    )
    answer = refund.call(idemwatch.Run("acme", "run-x"), {"order": "A-1", "amount_p": 1})
    assert answer["status"] == "not_attempted" and provider.calls == 0
