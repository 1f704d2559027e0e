"""An in-memory stand-in for :class:`idemwatch.Client`, for your own unit tests.

    from idemwatch.testing import FakeClient, FakePolicy

    idem = FakeClient({"issue_refund": FakePolicy(free_text_fields=("reason",),
                                                  natural_key=("order", "refund_no"))})
    refund = idem.tool("issue_refund", execute, find_by_key=find)   # your real tool code
    ...
    assert idem.status_of(outcome.key) == "DONE"

It runs the protocol's decisions in memory — execute, replay, stored failure, payload
mismatch (with ``intent_key`` through a natural key), UNKNOWN taken over and reconciled,
a person's resolution — so your tool, your ``classify`` and your model-facing answers are
tested without a server. It is not the guard: no leases run out (``expire(key)`` does it),
no durability, no metrics, one process. Test against a real ``idemwatch serve`` too
(``clients/run-tests.sh`` shows how).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ._errors import InFlight, LeaseLost, NeedsHumanReview, NotFound, PayloadMismatch, UnknownTool
from ._types import JSON, Decision, ErrorClass, Intent, KeyState
from ._tool import GuardedTool


@dataclass(frozen=True)
class FakePolicy:
    """A tool's tools-file entry, as the fake applies it."""

    call_timeout: float = 10.0
    key_retention: float = 86400.0
    free_text_fields: tuple[str, ...] = ()
    natural_key: tuple[str, ...] = ()


@dataclass
class _Record:
    key: str
    intent: dict[str, str]
    business_ref: str | None
    args: dict[str, JSON]
    status: str = "IN_PROGRESS"
    token: int = 1
    result: JSON = None
    error: str | None = None
    escalated: bool = False
    released: bool = False
    log: list[str] = field(default_factory=list)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class FakeClient:
    """The methods a guarded tool calls, in memory; ``tool``/``guard`` as on ``Client``."""

    def __init__(self, tools: Mapping[str, FakePolicy], *, worker: str = "test") -> None:
        self.tools = dict(tools)
        self.worker = worker
        self.records: dict[str, _Record] = {}
        self._natural: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    # --- what tests look at and do ----------------------------------------------------
    def status_of(self, key: str) -> str:
        return self.records[key].status

    def expire(self, key: str) -> None:
        """The lease of an IN_PROGRESS key ran out (its worker died): the next admit takes over."""
        with self._lock:
            self.records[key].status = "UNKNOWN"

    def resolve(self, key: str, resolution: str, result: JSON = None) -> None:
        """A person decides: ``done`` (with ``result``), ``failed`` or ``release``."""
        with self._lock:
            rec = self.records[key]
            rec.token += 1
            rec.escalated = False
            if resolution == "done":
                rec.status, rec.result = "DONE", result
            elif resolution == "failed":
                rec.status, rec.error = "FAILED", "resolved as failed"
            else:
                rec.status, rec.released = "UNKNOWN", True
            rec.log.append(f"resolved:{resolution}")

    # --- the protocol -----------------------------------------------------------------
    def _policy(self, tool: str) -> FakePolicy:
        policy = self.tools.get(tool)
        if policy is None:
            raise UnknownTool(f"the tool {tool!r} is not in the fake's tools", field="intent.tool")
        return policy

    def _execute(self, rec: _Record, decision: str = "execute", **extra: Any) -> Decision:
        policy = self._policy(rec.intent["tool"])
        return Decision.from_json(
            {
                "decision": decision,
                "key": rec.key,
                "fencing_token": rec.token,
                "args": dict(rec.args),
                "policy": {
                    "tool": rec.intent["tool"],
                    "call_timeout_seconds": policy.call_timeout,
                    "key_retention_seconds": policy.key_retention,
                    "free_text_fields": list(policy.free_text_fields),
                },
                **extra,
            }
        )

    def admit(
        self, tool: str, intent: Intent, args: Mapping[str, JSON], *, business_ref: str | None = None
    ) -> Decision:
        policy = self._policy(tool)
        business = {k: v for k, v in args.items() if k not in policy.free_text_fields}
        own = _digest(intent.to_json(tool))
        with self._lock:
            key, via = own, None
            if policy.natural_key:
                nk = _digest({f: business.get(f) for f in policy.natural_key})
                holder = self._natural.setdefault((intent.tenant, tool, nk), own)
                if holder != own:
                    key, via = holder, own
            rec = self.records.get(key)
            if rec is None:
                rec = _Record(key, intent.to_json(tool), business_ref, business)
                self.records[key] = rec
                rec.log.append("claimed")
                return self._execute(rec)
            if _digest(rec.args) != _digest(business):
                differing = sorted(k for k in set(rec.args) | set(business) if rec.args.get(k) != business.get(k))
                raise PayloadMismatch(
                    f"key {key} was first used with other arguments",
                    key=key,
                    code="payload_mismatch",
                    status=422,
                    differing_fields=differing,
                    intent_key=via,
                )
            if rec.status == "DONE":
                return Decision.from_json({"decision": "replay", "key": key, "result": rec.result, "replayed": True})
            if rec.status == "FAILED":
                return Decision.from_json({"decision": "failed", "key": key, "error": rec.error, "replayed": True})
            if rec.status == "IN_PROGRESS":
                raise InFlight(f"key {key} is in flight", key=key, code="in_flight", status=409, retry_after=0.01)
            if rec.escalated:
                raise NeedsHumanReview(f"key {key} needs a person", key=key, code="needs_human_review", status=409)
            rec.token += 1
            rec.status = "IN_PROGRESS"
            rec.log.append("taken_over")
            return self._execute(rec, "reconcile", previous_status="UNKNOWN", resend_allowed=True)

    def _fenced(self, key: str, token: int) -> _Record:
        rec = self.records.get(key)
        if rec is None:
            raise NotFound(f"no key {key}", key=key, code="not_found", status=404)
        if rec.token != token or rec.status != "IN_PROGRESS":
            raise LeaseLost(f"token {token} is stale", key=key, code="lease_lost", status=409, current_token=rec.token)
        return rec

    def settle(self, key: str, fencing_token: int, outcome: str, *, result: JSON = None, error: str | None = None, reason: str | None = None, duration_ms: int | None = None) -> Decision:
        with self._lock:
            rec = self._fenced(key, fencing_token)
            rec.status = {"done": "DONE", "failed": "FAILED"}.get(outcome, "UNKNOWN")
            rec.result, rec.error = (result, None) if outcome == "done" else (None, error or reason)
            rec.log.append(f"settled:{outcome}")
            return Decision.from_json({"decision": "settled", "key": key, "status": rec.status})

    def reconcile(self, key: str, fencing_token: int, lookup: str, *, result: JSON = None, error: str | None = None, duration_ms: int | None = None) -> Decision:
        with self._lock:
            rec = self._fenced(key, fencing_token)
            rec.log.append(f"lookup:{lookup}")
            if lookup == "found":
                rec.status, rec.result = "DONE", result
                return Decision.from_json({"decision": "replay", "key": key, "result": result, "replayed": True})
            if lookup == "not_found":
                return self._execute(rec)
            rec.status = "UNKNOWN"
            return Decision.from_json({"decision": "unknown", "key": key, "reason": error or "lookup failed"})

    def get_key(self, key: str, *, after_token: int | None = None, wait: float | None = None) -> KeyState:
        rec = self.records.get(key)
        if rec is None:
            raise NotFound(f"no key {key}", key=key, code="not_found", status=404)
        return KeyState(
            key=key, status=rec.status, fencing_token=rec.token, result=rec.result, error=rec.error,
            awaiting_person=rec.escalated and rec.status == "UNKNOWN", release_approved=rec.released,
        )

    def list_keys(self, *, workflow_id: str | None = None, business_ref: str | None = None, tenant: str | None = None, tool: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        rows = [
            {"key": r.key, "status": r.status, "business_ref": r.business_ref, **r.intent}
            for r in reversed(list(self.records.values()))
            if (workflow_id is None or r.intent["workflow_id"] == workflow_id)
            and (business_ref is None or r.business_ref == business_ref)
            and (tenant is None or r.intent["tenant"] == tenant)
            and (tool is None or r.intent["tool"] == tool)
        ]
        return rows[: limit or 20]

    def wait_for_person(self, key: str, timeout: float, *, after_token: int | None = None) -> KeyState:
        return self.get_key(key)

    def tool(self, name: str, execute: Callable[[str, dict[str, JSON]], JSON], *, find_by_key: Callable[[str], JSON], classify: Callable[[BaseException], ErrorClass | str] | None = None, **kw: Any) -> GuardedTool:
        return GuardedTool(self, name, execute, find_by_key=find_by_key, classify=classify, backoff_base=0.01, **kw)  # type: ignore[arg-type]

    def guard(self, name: str, **kw: Any) -> Callable[[Callable[[str, dict[str, JSON]], JSON]], GuardedTool]:
        return lambda execute: self.tool(name, execute, **kw)


__all__ = ["FakeClient", "FakePolicy"]
