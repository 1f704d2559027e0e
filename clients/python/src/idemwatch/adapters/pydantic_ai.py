"""Pydantic AI tools (``pydantic-ai-slim``): ``pip install "idemwatch[pydantic-ai]"``.

    agent = Agent(model, deps_type=Run, tools=[to_tool(refund), status_tool(status)])
    agent.run_sync(text, deps=run)                 # deps: an idemwatch.Run, or has .idemwatch_run

The run comes from ``RunContext.deps`` (pass ``run_of`` to read it elsewhere). Never
``RunContext.tool_call_id`` or ``run_step``: they change when the model asks again.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic_ai import RunContext, Tool

from ..agent import Run, StatusTool
from ._core import STATUS_SCHEMA, GuardedFunction, aask, run_in

RunOf = Callable[[RunContext[Any]], Run]


def run_from_deps(ctx: RunContext[Any]) -> Run:
    """The default ``run_of``: the deps themselves, or their ``idemwatch_run``."""
    return run_in(ctx.deps, "the agent's deps")


def to_tool(guarded: GuardedFunction, *, run_of: RunOf = run_from_deps) -> Tool[Any]:
    """A ``Tool`` with the function's name, parameter schema and docstring (as
    ``Tool(fn)`` infers them), answering with the ``for_model`` dict."""
    inferred = Tool(guarded.fn).tool_def

    async def invoke(ctx: RunContext[Any], **kwargs: Any) -> dict[str, Any]:
        return await guarded.ainvoke(run_of(ctx), kwargs)

    return Tool.from_schema(
        invoke,
        name=inferred.name,
        description=inferred.description,
        json_schema=inferred.parameters_json_schema,
        takes_ctx=True,
    )


def status_tool(status: StatusTool, *, run_of: RunOf = run_from_deps) -> Tool[Any]:
    """The read-only status tool (``check_action_status``) for the model."""

    async def invoke(ctx: RunContext[Any], **kwargs: Any) -> dict[str, Any]:
        return await aask(status, run_of(ctx), kwargs)

    return Tool.from_schema(
        invoke,
        name=status.name,
        description=status.description,
        json_schema=STATUS_SCHEMA,
        takes_ctx=True,
    )


__all__ = ["run_from_deps", "status_tool", "to_tool"]
