"""What a guarded tool returns to the model, one shape per outcome.

An agent handed an ambiguity ("error: timeout") behaves worst: it re-plans and calls again
with a fresh intent. These results say what happened and what the model should do next, in
words it can follow. ``for_model`` takes an :class:`Outcome` or the error a guarded call
raised; anything else is re-raised unchanged so a programming error is never hidden.

    try:
        return for_model(refund.run(intent, args), action="the refund")
    except Exception as exc:
        return for_model(exc, action="the refund")
"""

from __future__ import annotations

from typing import Any

from ._errors import (
    IdemwatchError,
    InFlight,
    InvalidRequest,
    LeaseLost,
    NeedsHumanReview,
    OperationFailed,
    OutcomeUnknown,
    PayloadMismatch,
)
from ._types import Outcome

#: The statuses a model can see, in the order the docs list them.
STATUSES = (
    "done",
    "replayed",
    "failed",
    "unknown",
    "in_flight",
    "payload_mismatch",
    "needs_human_review",
)


def for_model(value: Outcome | BaseException, *, action: str = "the action") -> dict[str, Any]:
    """The JSON object a tool hands back to the model for ``value``."""
    if isinstance(value, Outcome):
        if value.replayed:
            return {
                "status": "replayed",
                "result": value.result,
                "next": f"{action} had already been done for this request; this is the original "
                f"result. Do not do it again.",
            }
        return {
            "status": "done",
            "result": value.result,
            "next": f"{action} is done. Do not call the tool again for this request.",
        }
    if isinstance(value, OperationFailed):
        return {
            "status": "failed",
            "error": value.error,
            "next": f"{action} was refused and nothing happened. Do not retry the same call; "
            f"tell the user why, or ask them how to proceed.",
        }
    if isinstance(value, PayloadMismatch):
        fields = ", ".join(value.differing_fields) or "its arguments"
        if value.problem.get("stored_status") == "UNKNOWN":
            # The earlier call's outcome is unknown: it is not known to have run.
            return {
                "status": "payload_mismatch",
                "differing_fields": list(value.differing_fields),
                "next": f"an earlier attempt of {action} with other values ({fields}) may or may "
                f"not have happened; it is being checked. Do not retry; tell the user a person "
                f"is checking it.",
            }
        return {
            "status": "payload_mismatch",
            "differing_fields": list(value.differing_fields),
            "next": f"this step already ran {action} with a different {fields}. Do not retry; "
            f"if the user really wants a different one, confirm with them first: it is a new "
            f"request.",
        }
    if isinstance(value, NeedsHumanReview):
        return {
            "status": "needs_human_review",
            "next": f"nobody can tell whether {action} happened, and retrying could do it twice. "
            f"Stop; tell the user a person is checking it. Do not call the tool again.",
        }
    if isinstance(value, (InFlight, LeaseLost)):
        out: dict[str, Any] = {
            "status": "in_flight",
            "next": f"{action} is being processed by another worker right now. Do not start a "
            f"new one; check its status later.",
        }
        if value.retry_after is not None:
            out["retry_after_seconds"] = value.retry_after
        return out
    if isinstance(value, OutcomeUnknown) or (
        isinstance(value, IdemwatchError)
        and value.retryable
        and not isinstance(value, InvalidRequest)
    ):
        return {
            "status": "unknown",
            "next": f"it is not known yet whether {action} happened. Check its status before "
            f"calling again, and never call again with new arguments; calling again with the "
            f"same request is safe (it checks first).",
        }
    if isinstance(value, BaseException):
        raise value
    raise TypeError(f"for_model takes an Outcome or an exception, got {type(value).__name__}")
