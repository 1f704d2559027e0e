"""LangChain / LangGraph tools (``langchain-core``): ``pip install "idemwatch[langchain]"``.

    tools = [to_tool(refund), status_tool(status)]

The run comes from the ``RunnableConfig`` the graph passes every tool:
``config["configurable"]`` with ``thread_id`` (the checkpointer's thread: the run),
``tenant`` and, for an approved second action, ``approvals`` (business object ->
:class:`~idemwatch.Approval`). Pass ``run_of`` to read them elsewhere. Never the tool-call
id: a re-issued call carries a new one.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool

from ..agent import Run, StatusTool
from ._core import STATUS_SCHEMA, GuardedFunction, aask

RunOf = Callable[[RunnableConfig], Run]


def run_from_config(config: RunnableConfig) -> Run:
    """The default ``run_of``: ``configurable.thread_id``, ``.tenant``, ``.approvals``."""
    conf = (config or {}).get("configurable") or {}
    if not conf.get("thread_id") or not conf.get("tenant"):
        raise ValueError(
            "idemwatch needs config['configurable']['thread_id'] (the run) and ['tenant']"
        )
    return Run(
        tenant=str(conf["tenant"]),
        run_id=str(conf["thread_id"]),
        approvals=conf.get("approvals") or {},
    )


def to_tool(guarded: GuardedFunction, *, run_of: RunOf = run_from_config) -> StructuredTool:
    """A ``StructuredTool`` with the function's name, argument schema and docstring,
    answering the model with the ``for_model`` dict as JSON."""
    schema = StructuredTool.from_function(guarded.fn).args_schema

    def call(config: RunnableConfig, **kwargs: Any) -> str:
        return json.dumps(guarded.invoke(run_of(config), kwargs), default=str)

    async def acall(config: RunnableConfig, **kwargs: Any) -> str:
        return json.dumps(await guarded.ainvoke(run_of(config), kwargs), default=str)

    return StructuredTool.from_function(
        func=call,
        coroutine=acall,
        name=guarded.name,
        description=guarded.description,
        args_schema=schema,
    )


def status_tool(status: StatusTool, *, run_of: RunOf = run_from_config) -> StructuredTool:
    """The read-only status tool (``check_action_status``) for the model."""

    def call(config: RunnableConfig, **kwargs: Any) -> str:
        kw = {k: kwargs.get(k) for k in ("tool", "args", "key")}
        return json.dumps(status.ask(run_of(config), **kw), default=str)

    async def acall(config: RunnableConfig, **kwargs: Any) -> str:
        return json.dumps(await aask(status, run_of(config), kwargs), default=str)

    return StructuredTool.from_function(
        func=call,
        coroutine=acall,
        name=status.name,
        description=status.description,
        args_schema=STATUS_SCHEMA,
    )


__all__ = ["run_from_config", "status_tool", "to_tool"]
