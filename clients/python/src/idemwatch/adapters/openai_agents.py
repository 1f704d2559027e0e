"""OpenAI Agents SDK function tools (``openai-agents``): ``pip install "idemwatch[openai-agents]"``.

    agent = Agent(name="support", tools=[to_tool(refund), status_tool(status)])
    await Runner.run(agent, text, context=run)      # run: an idemwatch.Run, or has .run

The run comes from the run context (``RunContextWrapper.context``): an
:class:`~idemwatch.Run` or an object whose ``idemwatch_run`` attribute is one (pass
``run_of`` to read it elsewhere). Never ``ToolContext.tool_call_id``: a re-issued call
carries a new one.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from agents import FunctionTool, RunContextWrapper
from agents.function_schema import function_schema

from ..agent import Run, StatusTool
from ._core import STATUS_SCHEMA, GuardedFunction, aask, run_in

RunOf = Callable[[RunContextWrapper[Any]], Run]


def run_from_context(ctx: RunContextWrapper[Any]) -> Run:
    """The default ``run_of``: the context itself, or its ``idemwatch_run``."""
    return run_in(ctx.context, "the run context")


def _arguments(raw: str) -> dict[str, Any]:
    data = json.loads(raw or "{}")
    if not isinstance(data, dict):
        raise ValueError("tool arguments must be a JSON object")
    return data


def to_tool(guarded: GuardedFunction, *, run_of: RunOf = run_from_context) -> FunctionTool:
    """A ``FunctionTool`` with the function's name, JSON schema and docstring (as
    ``@function_tool`` would make), answering with the ``for_model`` dict as JSON."""
    schema = function_schema(guarded.fn)

    async def invoke(ctx: Any, raw: str) -> str:
        answer = await guarded.ainvoke(run_of(ctx), _arguments(raw))
        return json.dumps(answer, default=str)

    return FunctionTool(
        name=schema.name,
        description=schema.description or "",
        params_json_schema=schema.params_json_schema,
        on_invoke_tool=invoke,
        strict_json_schema=True,
    )


def status_tool(status: StatusTool, *, run_of: RunOf = run_from_context) -> FunctionTool:
    """The read-only status tool (``check_action_status``) for the model."""

    async def invoke(ctx: Any, raw: str) -> str:
        return json.dumps(await aask(status, run_of(ctx), _arguments(raw)), default=str)

    return FunctionTool(
        name=status.name,
        description=status.description,
        params_json_schema=STATUS_SCHEMA,
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


__all__ = ["run_from_context", "status_tool", "to_tool"]
