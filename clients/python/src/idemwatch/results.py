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
    ConfigurationError,
    DoneNotRecorded,
    IdemwatchError,
    InFlight,
    InvalidRequest,
    LeaseLost,
    NeedsHumanReview,
    NotAttempted,
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
    "not_attempted",
    "done_not_recorded",
    "already_requested",
)


def _key_text(key: str | None) -> str:
    return f" (key {key})" if key else ""


def _already_requested(value: PayloadMismatch, action: str) -> dict[str, Any]:
    """The tool's natural key is held by another intent: the first action exists."""
    existing = value.existing
    out: dict[str, Any] = {"status": "already_requested", "key": value.key}
    what = f"{action} was already requested for this object{_key_text(value.key)}"
    if existing is not None:
        out["existing_status"] = existing.status
        if existing.result is not None:
            out["result"] = existing.result
        what += f"; it is {existing.status}"
    fields = ", ".join(value.differing_fields) or "arguments"
    out["differing_fields"] = list(value.differing_fields)
    out["next"] = (
        f"{what}, with a different {fields}. Nothing new was done. Do not call again, "
        f"with these or other values. If the user really wants a second {action_noun(action)}, "
        f"say so and ask them to confirm why: a second one is a new action that a person or "
        f"a policy approves, and the harness then declares it (a new action number with the "
        f"approved reason). Calling again yourself will not do it."
    )
    return out


def action_noun(action: str) -> str:
    """``the refund`` -> ``refund``: the word after the article, for "a second refund"."""
    for article in ("the ", "a ", "an "):
        if action.startswith(article):
            return action[len(article) :]
    return action


def for_model(
    value: Outcome | BaseException, *, action: str = "the action", same_key: bool = False
) -> dict[str, Any]:
    """The JSON object a tool hands back to the model for ``value``.

    ``same_key``: the caller derives the intent from what names the action (the run and
    the business object), so a call the model makes again reaches the same key. Only
    then is the model told that calling again is safe; otherwise a re-issued call could
    carry a new key and act twice, and the model is told to check the status instead.
    """
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
    if isinstance(value, PayloadMismatch) and value.intent_key:
        return _already_requested(value, action)
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
    if isinstance(value, DoneNotRecorded):
        return {
            "status": "done_not_recorded",
            "key": value.key,
            "result": value.result,
            "next": f"{action} is done (this is its result), but idemwatch has not recorded it "
            f"yet; it will be. Do not call the tool again for this request: it is done.",
        }
    if isinstance(value, NotAttempted):
        return {
            "status": "not_attempted",
            "next": f"{action} was not attempted: the guard service could not be reached, so "
            f"nothing was done. You may call the tool again later with the same request.",
        }
    if isinstance(value, ConfigurationError):
        raise value
    if isinstance(value, NeedsHumanReview):
        return {
            "status": "needs_human_review",
            "key": value.key,
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
        then = (
            "If it is still unknown, calling again with the same request is safe: the guard "
            "looks the effect up before acting, so it cannot happen twice."
            if same_key
            else "Do not call the tool again until the status says it did not happen."
        )
        return {
            "status": "unknown",
            "key": value.key,
            "next": f"it is not known yet whether {action} happened{_key_text(value.key)}. "
            f"Check its status first (the status tool, with this key), and never call again "
            f"with new arguments. {then}",
        }
    if isinstance(value, BaseException):
        raise value
    raise TypeError(f"for_model takes an Outcome or an exception, got {type(value).__name__}")
