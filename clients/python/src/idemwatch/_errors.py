"""Errors that say what to do, and the one mapping from the server's problem documents.

Every error carries ``retryable`` (may the same intent be tried again?) and
``retry_after`` (seconds to wait first, or None). Nothing here decides a rule: the server
has decided, and this module only names its answer.
"""

from __future__ import annotations

import email.utils
import time
from typing import Any, Mapping


class IdemwatchError(Exception):
    """Base of every error this package raises."""

    #: Whether the same intent may be tried again (after ``retry_after``).
    retryable: bool = False
    #: What to do, in one sentence.
    advice: str = "see detail"

    def __init__(
        self,
        detail: str,
        *,
        key: str | None = None,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        problem: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.key = key
        self.code = code
        self.status = status
        self.retry_after = retry_after
        self.problem: dict[str, Any] = dict(problem or {})

    def __str__(self) -> str:
        return f"{self.detail} ({self.advice})"


class InFlight(IdemwatchError):
    """Another worker holds the key's lease. Retry later with the same intent."""

    retryable = True
    advice = "retry later with the same intent, after retry_after"

    def __init__(self, detail: str, *, lease_until: str | None = None, **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.lease_until = lease_until


class PayloadMismatch(IdemwatchError):
    """The intent was first used with other business arguments. Never retry as is."""

    advice = "never retry as is: a changed action needs a new intent id"

    def __init__(
        self,
        detail: str,
        *,
        differing_fields: list[str] | None = None,
        stored_fingerprint: str | None = None,
        fingerprint: str | None = None,
        intent_key: str | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(detail, **kw)
        self.differing_fields = list(differing_fields or [])
        self.stored_fingerprint = stored_fingerprint
        self.fingerprint = fingerprint
        #: Set when the tool's natural key led to another intent's key (``key``): this
        #: caller's own key. The action was already requested by that other intent.
        self.intent_key = intent_key
        #: That first action's state (``GET /keys/{key}``), when the client could read it.
        self.existing: Any = None


class OperationFailed(IdemwatchError):
    """The provider refused definitively; every retry of this intent answers the same."""

    advice = "do not retry: the provider refused and did nothing"

    def __init__(self, detail: str, *, error: str = "", **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.error = error


class OutcomeUnknown(IdemwatchError):
    """Nobody knows whether the effect happened. Retry with the same intent: it reconciles first."""

    retryable = True
    advice = "retry with the same intent: the guard looks the effect up before any resend"

    def __init__(self, detail: str, *, reason: str = "", **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.reason = reason


class DoneNotRecorded(OutcomeUnknown):
    """The provider acted (``result``) but idemwatch could not record it: the key stays
    claimed until its lease ends and the next run of the intent finds the effect. Done."""

    advice = "do not act again: it is done; the next run of the intent records it"

    def __init__(self, detail: str, *, result: Any = None, **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.result = result


class NeedsHumanReview(IdemwatchError):
    """The provider forgot the key and shows no effect: a resend could act twice. Stop."""

    advice = "stop: a person resolves the key (wait_for_person), then run the same intent again"

    def __init__(
        self,
        detail: str,
        *,
        provider_retention_until: str | None = None,
        fencing_token: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(detail, **kw)
        self.provider_retention_until = provider_retention_until
        #: The token this worker held when it escalated: pass it to ``wait_for_person``.
        self.fencing_token = fencing_token


class LeaseLost(IdemwatchError):
    """This worker's fencing token is stale: someone took the key over and decides now."""

    advice = "stop: another worker owns the key; its outcome is the outcome"

    def __init__(self, detail: str, *, current_token: int | None = None, **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.current_token = current_token


class InvalidRequest(IdemwatchError):
    """A field is missing or malformed (``field`` names it). Fix the call; do not retry it."""

    advice = "fix the call: a field is missing or malformed"

    def __init__(self, detail: str, *, field: str | None = None, **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.field = field


class IntentRequired(InvalidRequest, ValueError):
    """Raised before any request when the caller gave no usable intent."""

    advice = "pass the intent from the orchestrator's recorded state"


class UnknownTool(InvalidRequest):
    """The tool is not in the server's tools file and no default policy is configured."""

    advice = "declare the tool in the server's tools file"


class Forbidden(IdemwatchError):
    """The token may not call the guard, or not for this tenant or tool."""

    advice = "use a worker token allowed for this tenant and tool"


class Unauthorized(Forbidden):
    """401: the token is missing or wrong (not a question of its tenants or tools)."""

    advice = (
        "the token is missing or wrong: pass a worker token from the server's auth file "
        "(Client(url, token=...), e.g. from IDEMWATCH_TOKEN)"
    )


class NotFound(IdemwatchError):
    """No such key (never admitted, or pruned)."""

    advice = "run the intent again: there is no key to settle, reconcile or wait on"


class Unavailable(IdemwatchError):
    """idemwatch could not answer (503, another 5xx, a network error, an answer this client
    does not know). Not a failure: retry with the same intent later."""

    retryable = True
    advice = "not a failure: retry with the same intent later"


class NotAttempted(Unavailable):
    """idemwatch could not be reached to admit the call, so the provider was not called:
    nothing was done by this attempt. Retry with the same intent later."""

    advice = "nothing was done: retry with the same intent later"


class ConfigurationError(IdemwatchError):
    """The URL does not lead to an idemwatch guard (404 on a guard route, or an answer that
    is not idemwatch's), or the token is missing or wrong (401). Retrying cannot help."""

    advice = "fix the client's configuration: the idemwatch URL or its token"


_BY_CODE: dict[str, type[IdemwatchError]] = {
    "invalid": InvalidRequest,
    "unknown_tool": UnknownTool,
    "forbidden": Forbidden,
    "unauthorized": Unauthorized,
    "not_found": NotFound,
    "in_flight": InFlight,
    "needs_human_review": NeedsHumanReview,
    "lease_lost": LeaseLost,
    "payload_mismatch": PayloadMismatch,
    "unavailable": Unavailable,
    "internal": Unavailable,
    "timeout": Unavailable,
    # A client bug, not a passing condition: retrying the same request cannot help.
    "too_large": InvalidRequest,
    "method_not_allowed": InvalidRequest,
}


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """A ``Retry-After`` header: delay-seconds or an HTTP date."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def from_problem(
    status: int,
    problem: Mapping[str, Any] | None,
    *,
    retry_after_header: str | None = None,
    key: str | None = None,
) -> IdemwatchError:
    """Maps one non-2xx answer to an error. Unknown codes, 5xx and answers that are not
    problem documents become :class:`Unavailable` (retryable, never a failure)."""
    doc: dict[str, Any] = dict(problem) if isinstance(problem, Mapping) else {}
    code = doc.get("code") if isinstance(doc.get("code"), str) else None
    detail = str(doc.get("detail") or doc.get("title") or f"idemwatch answered HTTP {status}")
    retry_after = _number(doc.get("retry_after"))
    if retry_after is None:
        retry_after = parse_retry_after(retry_after_header)
    common: dict[str, Any] = {
        "key": doc.get("key") if isinstance(doc.get("key"), str) else key,
        "code": code,
        "status": status,
        "retry_after": retry_after,
        "problem": doc,
    }
    if status == 404 and not isinstance(doc.get("key"), str):
        # The guard's 404 always names the key it did not find; a 404 without one is a
        # route that does not exist: the URL does not lead to an idemwatch guard.
        return ConfigurationError(
            f"HTTP 404 from the guard route: the URL does not lead to an idemwatch guard "
            f"(serve) of this version: {detail}",
            **common,
        )
    cls = _BY_CODE.get(code or "")
    if cls is None:
        if status == 401:
            return Unauthorized(detail, **common)
        if status == 403 and code is None:
            return Forbidden(detail, **common)
        return Unavailable(detail, **common)
    if cls is InFlight:
        return InFlight(detail, lease_until=doc.get("lease_until"), **common)
    if cls is PayloadMismatch:
        fields = doc.get("differing_fields")
        return PayloadMismatch(
            detail,
            differing_fields=[str(f) for f in fields] if isinstance(fields, list) else [],
            stored_fingerprint=doc.get("stored_fingerprint"),
            fingerprint=doc.get("fingerprint"),
            intent_key=doc.get("intent_key") if isinstance(doc.get("intent_key"), str) else None,
            **common,
        )
    if cls is NeedsHumanReview:
        return NeedsHumanReview(
            detail, provider_retention_until=doc.get("provider_retention_until"), **common
        )
    if cls is LeaseLost:
        token = doc.get("current_token")
        return LeaseLost(detail, current_token=token if isinstance(token, int) else None, **common)
    if issubclass(cls, InvalidRequest):
        field = doc.get("field")
        return cls(detail, field=field if isinstance(field, str) else None, **common)
    return cls(detail, **common)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return max(0.0, float(value))
