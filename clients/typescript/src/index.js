// idemwatch: run a side-effecting tool at most once per intent, through an idemwatch guard.
// The server (`idemwatch serve`) derives the key and the fingerprint and keeps every rule;
// this package calls your provider when the server says so and reports what happened.

export { Client, defaultWorker, MAX_WAIT_SECONDS, VERSION } from "./client.js";
export { GuardedTool, backoffDelayMs, classifyError, currentCall, describe, requireIntent } from "./tool.js";
export {
  ConfigurationError,
  DoneNotRecorded,
  NotAttempted,
  Unauthorized,
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
  fromProblem,
  parseRetryAfter,
} from "./errors.js";
export { STATUSES, forModel } from "./results.js";
export { AgentTool, STATUS_KEYS, StatusTool, approval, businessObject } from "./agent.js";
