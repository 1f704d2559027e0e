"""The LangChain adapter against the real ``langchain-core``: a fake chat model
(``GenericFakeChatModel``) scripts the conversation; tools are invoked with the tool calls it
emits, as a LangGraph ``ToolNode`` would."""

from __future__ import annotations

import pytest

import idemwatch
from fake_provider import FakeProvider
from scenario import conversation

lc = pytest.importorskip("langchain_core", reason="*** SKIPPED (langchain-core not installed) ***")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402

from idemwatch.adapters import langchain as adapter  # noqa: E402


def test_a_scripted_langchain_conversation_makes_the_intended_refunds(
    client: idemwatch.Client, provider: FakeProvider
) -> None:
    talk = conversation(client, provider)
    tools = {t.name: t for t in [adapter.to_tool(talk.refund), adapter.status_tool(talk.status)]}
    assert tools["agent_refund"].description.startswith("Refund an order.")
    assert set(tools["agent_refund"].args) == {"order", "amount_p", "reason"}

    script = [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{n}"}])
        for n, (name, args) in enumerate(talk.turns())
    ]
    model = GenericFakeChatModel(messages=iter([*script, AIMessage(content="All done.")]))
    config = {"configurable": {"thread_id": talk.run.run_id, "tenant": "acme", "approvals": talk.run.approvals}}
    messages: list = [HumanMessage(content="Refund order please")]
    for n in range(len(script)):
        ai = model.invoke(messages)
        messages.append(ai)
        talk.before_turn(n)
        for call in ai.tool_calls:
            result = tools[call["name"]].invoke({**call, "type": "tool_call"}, config=config)
            messages.append(result)
            talk.record(result.content)
    assert model.invoke(messages).content == "All done."
    talk.check()
