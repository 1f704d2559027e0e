"""The OpenAI Agents SDK adapter against the real ``openai-agents`` ``Runner``: a scripted
``Model`` (the SDK's model interface, no network) emits the conversation's function calls
and reads the tool outputs the Runner feeds back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import idemwatch
from fake_provider import FakeProvider
from scenario import conversation

pytest.importorskip("agents", reason="*** SKIPPED (openai-agents not installed) ***")

from agents import Agent, ModelResponse, RunConfig, Runner, Usage  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from idemwatch.adapters import openai_agents as adapter  # noqa: E402


class ScriptedModel(Model):
    """Answers each model turn from a script; records the tool outputs it was given."""

    def __init__(self, talk: Any) -> None:
        self.talk = talk
        self.turn = 0

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any) -> ModelResponse:
        if isinstance(input, list) and self.turn:
            outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
            self.talk.record(outputs[-1]["output"])
        turns = self.talk.turns()
        if self.turn < len(turns):
            name, args_ = turns[self.turn]
            self.talk.before_turn(self.turn)
            self.turn += 1
            item: Any = ResponseFunctionToolCall(
                arguments=json.dumps(args_), call_id=f"call_{self.turn}", name=name,
                type="function_call", id=f"fc_{self.turn}", status="completed",
            )
        else:
            item = ResponseOutputMessage(
                id="msg_1", role="assistant", status="completed", type="message",
                content=[ResponseOutputText(text="All done.", type="output_text", annotations=[])],
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


def test_a_scripted_agents_sdk_conversation_makes_the_intended_refunds(
    client: idemwatch.Client, provider: FakeProvider
) -> None:
    talk = conversation(client, provider)
    refund = adapter.to_tool(talk.refund)
    assert refund.name == "agent_refund" and refund.description.startswith("Refund an order.")
    assert set(refund.params_json_schema["properties"]) == {"order", "amount_p", "reason"}
    agent = Agent(name="support", tools=[refund, adapter.status_tool(talk.status)])
    result = asyncio.run(
        Runner.run(
            agent,
            "Refund the order please",
            context=talk.run,
            max_turns=10,
            run_config=RunConfig(model=ScriptedModel(talk), tracing_disabled=True),
        )
    )
    assert result.final_output == "All done."
    talk.check()
