"""A guarded tool as a model calls it, and the status tool the model is told to check.

The one rule (docs/CLIENTS.md): **the intent names the action, never the turn**. A model
re-issues a call a few turns later, after a timeout or a compaction; that call must reach
the same key, so the intent is derived from the run and the business object (one refund
of order A-88214 in this run), never from the turn, a step counter or the tool-call id.

    refund = AgentTool(idem.tool("issue_refund", execute, find_by_key=...),
                       object_fields=["order"], action="the refund", number_field="refund_no")
    answer = refund.call(Run(tenant="acme", run_id=run.id), {"order": "A-88214", "amount_p": 4500})

A genuine second action on the same object is not a retry: a person or a policy approves
it, and the harness declares it (``Run.approvals``). It gets its own intent
(``order:A-88214#2``) and, with ``number_field``, its own natural key (``refund_no = 2``).

The framework adapters (``idemwatch.adapters.*``) are thin shells over these two classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ._errors import IdemwatchError, InvalidRequest, NotFound
from ._types import Intent, KeyState
from .results import for_model

if TYPE_CHECKING:
    from ._tool import AsyncGuardedTool, GuardedTool

#: How many of an object's keys the status tool describes (newest first).
STATUS_KEYS = 5


@dataclass(frozen=True)
class Approval:
    """A second (third…) action on one business object that a person or a policy approved.

    ``number`` is the action's number on the object (2 for a second refund of an order);
    ``reason`` and ``approved_by`` are recorded with the call's arguments (``approval``).
    """

    number: int
    reason: str
    approved_by: str

    def __post_init__(self) -> None:
        if self.number < 2:
            raise ValueError("an approval is for a second action or later: number >= 2")
        if not self.reason or not self.approved_by:
            raise ValueError("an approval needs a reason and who approved it")


@dataclass(frozen=True)
class Run:
    """The run a model acts in, from the harness's recorded state (survives a resume).

    ``approvals`` maps a business object (``order:A-88214``) to its approved extra action.
    """

    tenant: str
    run_id: str
    approvals: Mapping[str, Approval] = field(default_factory=dict)


def business_object(object_fields: Sequence[str], args: Mapping[str, Any]) -> str:
    """``order:A-88214``: the object the action is on, from the arguments that name it."""
    parts = []
    for name in object_fields:
        value = args.get(name)
        if value is None or value == "":
            raise InvalidRequest(
                f"args.{name}: names the business object and is required", field=f"args.{name}"
            )
        parts.append(f"{name}:{value}")
    return ",".join(parts)


class AgentTool:
    """A guarded tool, called with the model's arguments inside a :class:`Run`; every
    answer is the model-facing dict of :func:`idemwatch.for_model`."""

    def __init__(
        self,
        guarded: GuardedTool | AsyncGuardedTool,
        *,
        object_fields: Sequence[str],
        action: str = "the action",
        number_field: str | None = None,
    ) -> None:
        if not object_fields:
            raise ValueError("object_fields: name the arguments that name the business object")
        self.guarded = guarded
        self.name = guarded.name
        self.object_fields = tuple(object_fields)
        self.action = action
        self.number_field = number_field

    def prepare(self, run: Run, args: Mapping[str, Any]) -> tuple[Intent, dict[str, Any], str]:
        """The intent, the arguments to send and the business ref of one model call."""
        obj = business_object(self.object_fields, args)
        approval = run.approvals.get(obj)
        number = approval.number if approval else 1
        sent = dict(args)
        if self.number_field:
            sent[self.number_field] = number
        if approval:
            sent["approval"] = {"reason": approval.reason, "approved_by": approval.approved_by}
        intent = Intent(
            tenant=run.tenant,
            workflow_id=run.run_id,
            step_id=self.name,
            intent_id=obj if number == 1 else f"{obj}#{number}",
        )
        return intent, sent, obj

    def _answer(self, value: Any) -> dict[str, Any]:
        out = for_model(value, action=self.action, same_key=True)
        key = getattr(value, "key", None)
        if key and "key" not in out:
            out["key"] = key
        return out

    def call(self, run: Run, args: Mapping[str, Any]) -> dict[str, Any]:
        """Runs the tool (sync client) and answers the model."""
        try:
            intent, sent, ref = self.prepare(run, args)
            return self._answer(self.guarded.run(intent, sent, business_ref=ref))
        except IdemwatchError as exc:
            return self._answer(exc)

    async def acall(self, run: Run, args: Mapping[str, Any]) -> dict[str, Any]:
        """Runs the tool (asyncio client) and answers the model."""
        try:
            intent, sent, ref = self.prepare(run, args)
            return self._answer(await self.guarded.run(intent, sent, business_ref=ref))
        except IdemwatchError as exc:
            return self._answer(exc)


def _describe(state: KeyState, action: str) -> dict[str, Any]:
    """One key as the model reads it: its state, the result or reason, what to do next."""
    out: dict[str, Any] = {"key": state.key, "status": state.status}
    if state.status == "DONE":
        out["result"] = state.result
        out["next"] = f"{action} happened; this is its result. Do not do it again."
    elif state.status == "FAILED":
        out["error"] = state.error
        out["next"] = f"{action} was refused and did not happen. Do not retry it as is."
    elif state.awaiting_person:
        out["next"] = (
            f"nobody can tell whether {action} happened; a person is checking it. Do not "
            f"call the tool again; tell the user."
        )
    elif state.status == "UNKNOWN":
        out["next"] = (
            f"not known yet. Calling the tool again with the same request is safe: it looks "
            f"{action} up at the provider before acting."
        )
    else:
        out["next"] = f"{action} is being done right now. Wait, then ask for the status again."
    return out


def _nothing(action: str) -> dict[str, Any]:
    return {
        "status": "none",
        "actions": [],
        "next": f"no {action.removeprefix('the ')} was ever attempted for this object in this "
        f"run's tenant: it did not happen.",
    }


def _cannot_tell(exc: IdemwatchError) -> dict[str, Any]:
    if isinstance(exc, (InvalidRequest, NotFound)):
        return {"status": "error", "next": f"cannot tell: {exc.detail}"}
    return {
        "status": "unavailable",
        "next": f"the status cannot be read now ({exc.detail}); ask again later, and do not "
        f"call the action meanwhile.",
    }


class StatusTool:
    """The read-only status tool for the model: given a tool and its business arguments
    (or a key), where the action stands and what to do next. Works with a sync
    :class:`~idemwatch.Client` (:meth:`ask`) or an :class:`~idemwatch.AsyncClient`
    (:meth:`aask`)."""

    name = "check_action_status"
    description = (
        "Read-only: whether an action (e.g. a refund) on a business object already happened, "
        "its result or why not, and what to do next. Give the tool name and the arguments "
        "naming the object, or the key a previous answer gave. Never performs anything."
    )

    def __init__(self, client: Any, tools: Sequence[AgentTool]) -> None:
        self.client = client
        self.tools = {t.name: t for t in tools}

    def _plan(self, run: Run, tool: str | None, args: Mapping[str, Any] | None) -> tuple[AgentTool, str]:
        t = self.tools.get(tool or "")
        if t is None:
            raise InvalidRequest(
                f"tool: expected one of {sorted(self.tools)}, got {tool!r}", field="tool"
            )
        return t, business_object(t.object_fields, args or {})

    def ask(
        self,
        run: Run,
        *,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        """The answer for the model (sync client)."""
        try:
            if key:
                return self._one(self.client.get_key(key), tool)
            t, obj = self._plan(run, tool, args)
            listed = self.client.list_keys(
                business_ref=obj, tenant=run.tenant, tool=t.name, limit=STATUS_KEYS
            )
            return self._many([self.client.get_key(k["key"]) for k in listed], t.action)
        except IdemwatchError as exc:
            return _cannot_tell(exc)

    async def aask(
        self,
        run: Run,
        *,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        """The answer for the model (asyncio client)."""
        try:
            if key:
                return self._one(await self.client.get_key(key), tool)
            t, obj = self._plan(run, tool, args)
            listed = await self.client.list_keys(
                business_ref=obj, tenant=run.tenant, tool=t.name, limit=STATUS_KEYS
            )
            return self._many([await self.client.get_key(k["key"]) for k in listed], t.action)
        except IdemwatchError as exc:
            return _cannot_tell(exc)

    def _one(self, state: KeyState, tool: str | None) -> dict[str, Any]:
        action = self.tools[tool].action if tool in self.tools else "the action"
        one = _describe(state, action)
        return {"status": state.status, "actions": [one], "next": one["next"]}

    def _many(self, states: list[KeyState], action: str) -> dict[str, Any]:
        if not states:
            return _nothing(action)
        described = [_describe(s, action) for s in states]
        newest = described[0]
        return {"status": newest["status"], "actions": described, "next": newest["next"]}


__all__ = ["AgentTool", "Approval", "Run", "StatusTool", "business_object"]
