"""idemwatch: run a side-effecting tool at most once per intent, through an idemwatch guard.

The server (``idemwatch serve``) derives the key and the fingerprint and keeps every rule;
this package calls your provider when the server says so and reports what happened.
"""

__version__ = "0.1.0"

from ._client import AsyncClient, Client, default_worker
from ._errors import (
    Forbidden,
    IdemwatchError,
    InFlight,
    IntentRequired,
    InvalidRequest,
    LeaseLost,
    NeedsHumanReview,
    NotFound,
    OperationFailed,
    OutcomeUnknown,
    PayloadMismatch,
    Unavailable,
    UnknownTool,
    from_problem,
)
from ._tool import AsyncGuardedTool, GuardedTool
from ._types import CallContext, Decision, ErrorClass, Intent, KeyState, Outcome, Policy, current_call
from .results import for_model

__all__ = [
    "AsyncClient",
    "AsyncGuardedTool",
    "CallContext",
    "Client",
    "Decision",
    "ErrorClass",
    "Forbidden",
    "GuardedTool",
    "IdemwatchError",
    "InFlight",
    "Intent",
    "IntentRequired",
    "InvalidRequest",
    "KeyState",
    "LeaseLost",
    "NeedsHumanReview",
    "NotFound",
    "OperationFailed",
    "Outcome",
    "OutcomeUnknown",
    "PayloadMismatch",
    "Policy",
    "Unavailable",
    "UnknownTool",
    "current_call",
    "default_worker",
    "for_model",
    "from_problem",
]
