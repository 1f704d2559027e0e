"""idemwatch: run a side-effecting tool at most once per intent, through an idemwatch guard.

The server (``idemwatch serve``) derives the key and the fingerprint and keeps every rule;
this package calls your provider when the server says so and reports what happened.
"""

__version__ = "0.1.0"

from ._client import AsyncClient, Client, default_worker
from ._errors import (
    ConfigurationError,
    DoneNotRecorded,
    Forbidden,
    IdemwatchError,
    InFlight,
    IntentRequired,
    InvalidRequest,
    LeaseLost,
    NeedsHumanReview,
    NotAttempted,
    NotFound,
    OperationFailed,
    OutcomeUnknown,
    PayloadMismatch,
    Unauthorized,
    Unavailable,
    UnknownTool,
    from_problem,
)
from ._tool import AsyncGuardedTool, GuardedTool
from ._types import CallContext, Decision, ErrorClass, Intent, KeyState, Outcome, Policy, current_call
from .agent import AgentTool, Approval, Run, StatusTool
from .results import for_model

__all__ = [
    "AgentTool",
    "Approval",
    "Run",
    "StatusTool",
    "AsyncClient",
    "ConfigurationError",
    "DoneNotRecorded",
    "NotAttempted",
    "Unauthorized",
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
