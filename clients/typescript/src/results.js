// What a guarded tool returns to the model, one shape per outcome. An agent handed an
// ambiguity ("error: timeout") behaves worst: it re-plans and calls again with a fresh
// intent. These results say what happened and what to do next, in words it can follow.

import {
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
} from "./errors.js";

/** The statuses a model can see, in the order the docs list them. */
export const STATUSES = [
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
];

const keyText = (key) => (key ? ` (key ${key})` : "");
const noun = (action) => action.replace(/^(the|a|an) /, "");

/** The tool's natural key is held by another intent: the first action exists. */
function alreadyRequested(value, action) {
  const out = { status: "already_requested", key: value.key };
  let what = `${action} was already requested for this object${keyText(value.key)}`;
  if (value.existing) {
    out.existing_status = value.existing.status;
    if (value.existing.result != null) out.result = value.existing.result;
    what += `; it is ${value.existing.status}`;
  }
  const fields = value.differingFields.join(", ") || "arguments";
  out.differing_fields = [...value.differingFields];
  out.next =
    `${what}, with a different ${fields}. Nothing new was done. Do not call again, with these or other values. ` +
    `If the user really wants a second ${noun(action)}, say so and ask them to confirm why: a second one is a new action ` +
    `that a person or a policy approves, and the harness then declares it (a new action number with the approved reason). ` +
    `Calling again yourself will not do it.`;
  return out;
}

/**
 * The JSON object a tool hands back to the model for an outcome (`{key, result, replayed}`)
 * or the error a guarded call threw. Anything else is re-thrown so a bug is never hidden.
 */
export function forModel(value, { action = "the action", sameKey = false } = {}) {
  if (value instanceof Error) {
    if (value instanceof PayloadMismatch && value.intentKey) return alreadyRequested(value, action);
    if (value instanceof OperationFailed) {
      return {
        status: "failed",
        error: value.error,
        next: `${action} was refused and nothing happened. Do not retry the same call; tell the user why, or ask them how to proceed.`,
      };
    }
    if (value instanceof PayloadMismatch) {
      const fields = value.differingFields.join(", ") || "its arguments";
      if (value.problem?.stored_status === "UNKNOWN") {
        // The earlier call's outcome is unknown: it is not known to have run.
        return {
          status: "payload_mismatch",
          differing_fields: [...value.differingFields],
          next: `an earlier attempt of ${action} with other values (${fields}) may or may not have happened; it is being checked. Do not retry; tell the user a person is checking it.`,
        };
      }
      return {
        status: "payload_mismatch",
        differing_fields: [...value.differingFields],
        next: `this step already ran ${action} with a different ${fields}. Do not retry; if the user really wants a different one, confirm with them first: it is a new request.`,
      };
    }
    if (value instanceof DoneNotRecorded) {
      return {
        status: "done_not_recorded",
        key: value.key,
        result: value.result,
        next: `${action} is done (this is its result), but idemwatch has not recorded it yet; it will be. Do not call the tool again for this request: it is done.`,
      };
    }
    if (value instanceof NotAttempted) {
      return {
        status: "not_attempted",
        next: `${action} was not attempted: the guard service could not be reached, so nothing was done. You may call the tool again later with the same request.`,
      };
    }
    if (value instanceof ConfigurationError) throw value;
    if (value instanceof NeedsHumanReview) {
      return {
        status: "needs_human_review",
        key: value.key,
        next: `nobody can tell whether ${action} happened, and retrying could do it twice. Stop; tell the user a person is checking it. Do not call the tool again.`,
      };
    }
    if (value instanceof InFlight || value instanceof LeaseLost) {
      const out = {
        status: "in_flight",
        next: `${action} is being processed by another worker right now. Do not start a new one; check its status later.`,
      };
      if (value.retryAfter != null) out.retry_after_seconds = value.retryAfter;
      return out;
    }
    if (value instanceof OutcomeUnknown || (value instanceof IdemwatchError && value.retryable && !(value instanceof InvalidRequest))) {
      const then = sameKey
        ? "If it is still unknown, calling again with the same request is safe: the guard looks the effect up before acting, so it cannot happen twice."
        : "Do not call the tool again until the status says it did not happen.";
      return {
        status: "unknown",
        key: value.key,
        next: `it is not known yet whether ${action} happened${keyText(value.key)}. Check its status first (the status tool, with this key), and never call again with new arguments. ${then}`,
      };
    }
    throw value;
  }
  if (value && typeof value === "object" && "replayed" in value && "result" in value) {
    if (value.replayed) {
      return {
        status: "replayed",
        result: value.result,
        next: `${action} had already been done for this request; this is the original result. Do not do it again.`,
      };
    }
    return { status: "done", result: value.result, next: `${action} is done. Do not call the tool again for this request.` };
  }
  throw new TypeError("forModel takes an outcome ({key, result, replayed}) or an error");
}
