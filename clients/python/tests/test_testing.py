"""The in-memory test double: a user's tool, tested without a server, gets the same
answers as against ``idemwatch serve`` (test_agent.py runs the same story there)."""

from __future__ import annotations

from typing import Any

import idemwatch
from idemwatch.testing import FakeClient, FakePolicy


def test_the_fake_client_runs_the_protocol_in_memory() -> None:
    refunds: dict[str, dict[str, Any]] = {}
    fail_once = [True]

    def execute(key: str, args: dict[str, Any]) -> dict[str, Any]:
        refunds.setdefault(key, {"refund_id": f"rf_{len(refunds) + 1}", **args})
        if fail_once.pop() if fail_once else False:
            raise ConnectionError("reset after the provider acted")
        return refunds[key]

    idem = FakeClient({"issue_refund": FakePolicy(free_text_fields=("reason",), natural_key=("order", "refund_no"))})
    refund = idemwatch.AgentTool(
        idem.tool("issue_refund", execute, find_by_key=refunds.get),
        object_fields=["order"],
        action="the refund",
        number_field="refund_no",
    )
    run = idemwatch.Run("acme", "run-1", approvals={})
    args = {"order": "A-1", "amount_p": 4500, "reason": "late"}

    first = refund.call(run, args)
    assert first["status"] == "unknown"
    assert refund.call(run, {**args, "reason": "very late"})["status"] == "replayed"
    refused = refund.call(idemwatch.Run("acme", "run-2"), {**args, "amount_p": 10})
    assert refused["status"] == "already_requested" and refused["existing_status"] == "DONE"
    run.approvals["order:A-1"] = idemwatch.Approval(2, "second parcel lost", "ops:maria")
    assert refund.call(run, {**args, "amount_p": 10})["status"] == "done"
    assert len(refunds) == 2
    status = idemwatch.StatusTool(idem, [refund]).ask(run, tool="issue_refund", args={"order": "A-1"})
    assert [a["status"] for a in status["actions"]] == ["DONE", "DONE"]
