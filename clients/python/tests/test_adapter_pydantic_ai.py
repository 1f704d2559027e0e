"""The Pydantic AI adapter against the real ``pydantic-ai``: its ``FunctionModel`` (the
library's own scripted test model) emits the conversation's tool calls and reads the tool
returns the agent feeds back."""

from __future__ import annotations

from typing import Any

import pytest

import idemwatch
from fake_provider import FakeProvider
from scenario import conversation

pytest.importorskip("pydantic_ai", reason="*** SKIPPED (pydantic-ai not installed) ***")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from idemwatch.adapters import pydantic_ai as adapter  # noqa: E402


def test_a_scripted_pydantic_ai_conversation_makes_the_intended_refunds(
    client: idemwatch.Client, provider: FakeProvider
) -> None:
    talk = conversation(client, provider)
    turn = 0

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal turn
        tools = {t.name: t for t in info.function_tools}
        assert tools["agent_refund"].description.startswith("Refund an order.")
        assert set(tools["agent_refund"].parameters_json_schema["properties"]) == {"order", "amount_p", "reason"}
        if turn:
            returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
            talk.record(returns[-1].content)
        turns = talk.turns()
        if turn < len(turns):
            name, args = turns[turn]
            talk.before_turn(turn)
            turn += 1
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{turn}")])
        return ModelResponse(parts=[TextPart("All done.")])

    agent: Agent[Any, str] = Agent(
        FunctionModel(script),
        deps_type=idemwatch.Run,
        tools=[adapter.to_tool(talk.refund), adapter.status_tool(talk.status)],
    )
    result = agent.run_sync("Refund the order please", deps=talk.run)
    assert result.output == "All done."
    talk.check()
