"""What every adapter shares: the guarded function, and running it from async code."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .._tool import AsyncGuardedTool
from ..agent import AgentTool, Run, StatusTool


@dataclass(frozen=True)
class GuardedFunction:
    """A plain tool function and the :class:`~idemwatch.AgentTool` that guards it."""

    fn: Callable[..., Any]
    agent_tool: AgentTool

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def description(self) -> str:
        return inspect.getdoc(self.fn) or ""

    async def ainvoke(self, run: Run, args: Mapping[str, Any]) -> dict[str, Any]:
        """The model-facing answer, from async code (a sync client runs in a thread)."""
        if isinstance(self.agent_tool.guarded, AsyncGuardedTool):
            return await self.agent_tool.acall(run, args)
        return await asyncio.to_thread(self.agent_tool.call, run, args)

    def invoke(self, run: Run, args: Mapping[str, Any]) -> dict[str, Any]:
        return self.agent_tool.call(run, args)


def guard_function(
    client: Any,
    fn: Callable[..., Any],
    *,
    find_by_key: Callable[[str], Any],
    object_fields: Sequence[str],
    action: str = "the action",
    number_field: str | None = None,
    tool: str | None = None,
    classify: Callable[[BaseException], Any] | None = None,
    **tool_options: Any,
) -> GuardedFunction:
    """Guards ``fn`` as the tools-file tool ``tool`` (default: the function's name).

    The provider call gets the server's arguments (free text removed, the harness's
    ``number_field`` and ``approval`` left out unless ``fn`` names them) as keyword
    arguments; ``fn`` reads the key from :func:`idemwatch.current_call`. With an
    :class:`~idemwatch.AsyncClient`, ``fn`` and ``find_by_key`` are coroutine functions.
    """
    params = inspect.signature(fn).parameters

    def kwargs_of(args: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in args.items() if k in params}

    if inspect.iscoroutinefunction(fn):

        async def execute(key: str, args: dict[str, Any]) -> Any:
            return await fn(**kwargs_of(args))

    else:

        def execute(key: str, args: dict[str, Any]) -> Any:
            return fn(**kwargs_of(args))

    guarded = client.tool(
        tool or fn.__name__, execute, find_by_key=find_by_key, classify=classify, **tool_options
    )
    return GuardedFunction(
        fn,
        AgentTool(guarded, object_fields=object_fields, action=action, number_field=number_field),
    )


#: The JSON schema of the status tool's arguments, for frameworks that take one.
STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "description": "The tool whose action to check."},
        "args": {
            "type": "object",
            "description": "The arguments naming the business object (e.g. the order).",
            "additionalProperties": True,
        },
        "key": {"type": "string", "description": "A key an earlier answer gave."},
    },
    "additionalProperties": False,
}


def run_in(value: Any, where: str) -> Run:
    """``value`` itself when it is a :class:`Run`, else its ``idemwatch_run``."""
    run = value if isinstance(value, Run) else getattr(value, "idemwatch_run", None)
    if not isinstance(run, Run):
        raise ValueError(f"idemwatch needs {where} to be an idemwatch.Run (or carry .idemwatch_run)")
    return run


async def aask(status: StatusTool, run: Run, args: Mapping[str, Any]) -> dict[str, Any]:
    """The status tool's answer from async code, whichever client it holds."""
    kw = {k: args.get(k) for k in ("tool", "args", "key")}
    if inspect.iscoroutinefunction(status.client.get_key):
        return await status.aask(run, **kw)
    return await asyncio.to_thread(lambda: status.ask(run, **kw))
