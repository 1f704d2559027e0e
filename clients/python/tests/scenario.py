"""The scripted conversation every framework adapter runs (issue 49's trial): a refund that
times out after the provider acted, a status check, the model re-issuing the refund with
other words, and a second refund a person approved. Two refunds are intended; the fake
provider must see exactly two."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

import idemwatch
from fake_provider import FakeProvider
from idemwatch.adapters import guard_function

TOOL = "agent_refund"  # natural_key = ["order", "refund_no"] (clients/testdata/tools.toml)


@dataclass
class Conversation:
    provider: FakeProvider
    refund: Any  # GuardedFunction
    status: idemwatch.StatusTool
    run: idemwatch.Run
    order: str
    answers: list[dict[str, Any]] = field(default_factory=list)

    def turns(self) -> list[tuple[str, dict[str, Any]]]:
        """What the scripted model asks, turn by turn: (tool name, arguments)."""
        return [
            (TOOL, {"order": self.order, "amount_p": 4500, "reason": "arrived late"}),
            ("check_action_status", {"tool": TOOL, "args": {"order": self.order}}),
            (TOOL, {"order": self.order, "amount_p": 4500, "reason": "parcel came four days late"}),
            (TOOL, {"order": self.order, "amount_p": 3000, "reason": "second item damaged"}),
        ]

    def before_turn(self, n: int) -> None:
        """The harness between turns: a slow provider first, then a person's approval."""
        if n == 0:
            self.provider.fail_next("delay", seconds=2.5)  # acts, answers past the 1 s timeout
        if n == 3:
            self.run.approvals[f"order:{self.order}"] = idemwatch.Approval(
                2, "second item also damaged", "ops:maria"
            )

    def record(self, answer: Any) -> None:
        self.answers.append(json.loads(answer) if isinstance(answer, str) else dict(answer))

    def check(self) -> None:
        statuses = [a["status"] for a in self.answers]
        assert statuses == ["unknown", "UNKNOWN", "replayed", "done"], self.answers
        assert "same request is safe" in self.answers[0]["next"]
        assert self.answers[2]["key"] == self.answers[0]["key"]
        assert self.answers[3]["key"] != self.answers[0]["key"]
        assert len(self.provider.effects) == 2, "two refunds intended, two made"


def conversation(client: idemwatch.Client, provider: FakeProvider) -> Conversation:
    http = httpx.Client()  # one per conversation: a client per call costs an SSL context each
    def agent_refund(order: str, amount_p: int, reason: str = "") -> dict:
        """Refund an order. amount_p is in pence; reason is what the customer said."""
        call = idemwatch.current_call()
        assert call is not None
        r = http.post(
            f"{provider.url}/v1/refunds",
            json={"order": order, "amount_p": amount_p},
            headers={"Idempotency-Key": call.key},
            timeout=call.timeout,
        )
        r.raise_for_status()
        return r.json()

    def find_by_key(key: str) -> Any:
        r = http.get(f"{provider.url}/v1/refunds", params={"idempotency_key": key}, timeout=5)
        return None if r.status_code == 404 else r.json()

    refund = guard_function(
        client,
        agent_refund,
        find_by_key=find_by_key,
        object_fields=["order"],
        action="the refund",
        number_field="refund_no",
    )
    run = idemwatch.Run(tenant="acme", run_id=f"run-{uuid.uuid4().hex[:8]}", approvals={})
    return Conversation(
        provider,
        refund,
        idemwatch.StatusTool(client, [refund.agent_tool]),
        run,
        f"A-{uuid.uuid4().hex[:8]}",
    )
