"""Plain data the protocol carries: the intent, the tool's policy, decisions, outcomes."""

from __future__ import annotations

import enum
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Mapping

JSON = Any

_INTENT_FIELDS = ("tenant", "workflow_id", "step_id", "intent_id")


class ErrorClass(str, enum.Enum):
    """How a provider error bears on the effect (the Rust ``ErrorClass``)."""

    #: The provider said no and did nothing (card declined, 400, 422): the key becomes FAILED.
    DEFINITIVE = "definitive"
    #: Nobody knows (timeout, reset, 5xx, anything else): UNKNOWN, reconciled before any resend.
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Intent:
    """What the caller meant to do, stable across every retry of that intent.

    The fields name the action: the run and the business object (``workflow_id`` the
    run's id, ``intent_id`` ``"order:A-88214"``), from the orchestrator's recorded state.
    Never a random value, the clock, the turn, a step counter or the tool-call id: a model
    that re-issues the call gets a new one, and a new key acts again. The tool's name comes
    from the guarded tool, so the same intent fields cannot collide across tools.
    """

    tenant: str
    workflow_id: str
    step_id: str
    intent_id: str

    def to_json(self, tool: str) -> dict[str, str]:
        return {
            "tenant": self.tenant,
            "tool": tool,
            "workflow_id": self.workflow_id,
            "step_id": self.step_id,
            "intent_id": self.intent_id,
        }


@dataclass(frozen=True)
class Policy:
    """The tool's rules, from the server's tools file. A client cannot send or loosen them."""

    tool: str
    key_retention_seconds: float
    call_timeout_seconds: float
    free_text_fields: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        return cls(
            tool=str(data.get("tool", "")),
            key_retention_seconds=float(data.get("key_retention_seconds", 0)),
            call_timeout_seconds=float(data.get("call_timeout_seconds", 0)),
            free_text_fields=tuple(data.get("free_text_fields") or ()),
        )


@dataclass(frozen=True)
class Decision:
    """A 200 answer of admit, settle or reconcile: ``decision`` says what to do next."""

    decision: str
    key: str
    fencing_token: int | None = None
    lease_until: str | None = None
    args: dict[str, JSON] | None = None
    policy: Policy | None = None
    result: JSON = None
    error: str | None = None
    reason: str | None = None
    replayed: bool = False
    previous_status: str | None = None
    resend_allowed: bool | None = None
    resend_safe_until: str | None = None
    status: str | None = None
    raw: dict[str, JSON] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        policy = data.get("policy")
        return cls(
            decision=str(data.get("decision", "")),
            key=str(data.get("key", "")),
            fencing_token=data.get("fencing_token"),
            lease_until=data.get("lease_until"),
            args=data.get("args"),
            policy=Policy.from_json(policy) if isinstance(policy, Mapping) else None,
            result=data.get("result"),
            error=data.get("error"),
            reason=data.get("reason"),
            replayed=bool(data.get("replayed", False)),
            previous_status=data.get("previous_status"),
            resend_allowed=data.get("resend_allowed"),
            resend_safe_until=data.get("resend_safe_until"),
            status=data.get("status"),
            raw=dict(data),
        )


@dataclass(frozen=True)
class KeyState:
    """``GET /api/v1/guard/keys/{key}``: where a key stands (and whether a person is needed)."""

    key: str
    status: str
    fencing_token: int
    changed: bool = False
    awaiting_person: bool = False
    release_approved: bool = False
    result: JSON = None
    error: str | None = None
    provider_retention_until: str | None = None
    resend_safe_until: str | None = None
    raw: dict[str, JSON] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KeyState:
        return cls(
            key=str(data.get("key", "")),
            status=str(data.get("status", "")),
            fencing_token=int(data.get("fencing_token", 0)),
            changed=bool(data.get("changed", False)),
            awaiting_person=bool(data.get("awaiting_person", False)),
            release_approved=bool(data.get("release_approved", False)),
            result=data.get("result"),
            error=data.get("error"),
            provider_retention_until=data.get("provider_retention_until"),
            resend_safe_until=data.get("resend_safe_until"),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Outcome:
    """A successful guarded call (the Rust ``Outcome``).

    ``replayed`` is true when the result comes from an earlier attempt (a stored DONE, or
    an effect found at the provider by reconciliation): the tool did not act again.
    """

    key: str
    result: JSON
    replayed: bool


@dataclass(frozen=True)
class CallContext:
    """What the guard knows while ``execute`` or ``find_by_key`` runs.

    ``timeout`` is the tool's call timeout in seconds: give it to the provider's HTTP
    client. The lease ends at ``lease_until``; a call that outlives it loses the key.
    """

    key: str
    fencing_token: int
    timeout: float
    lease_until: str | None
    policy: Policy | None


_current: ContextVar[CallContext | None] = ContextVar("idemwatch_call", default=None)


def current_call() -> CallContext | None:
    """The guarded call in progress in this thread or task, or None outside one."""
    return _current.get()


def require_intent(intent: object) -> Intent:
    """Refuses to run without an intent from the caller: every field a non-empty string."""
    from ._errors import IntentRequired

    if not isinstance(intent, Intent):
        raise IntentRequired(
            "a guarded call needs an idemwatch.Intent from the orchestrator's recorded state "
            f"(tenant, workflow_id, step_id, intent_id), got {type(intent).__name__}"
        )
    for name in _INTENT_FIELDS:
        value = getattr(intent, name)
        if not isinstance(value, str) or not value:
            raise IntentRequired(
                f"intent.{name} must be a non-empty string from the recorded run state "
                f"(never random, never the clock), got {value!r}",
                field=f"intent.{name}",
            )
    return intent
