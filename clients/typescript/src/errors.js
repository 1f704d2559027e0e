// Errors that say what to do, and the one mapping from the server's problem documents.
// Every error carries `retryable` (may the same intent be tried again?) and `retryAfter`
// (seconds to wait first, or null). The server decides; this module only names its answer.

export class IdemwatchError extends Error {
  /** @param {string} detail @param {object} [opts] */
  constructor(detail, { key = null, code = null, status = null, retryAfter = null, problem = null, cause } = {}) {
    super(detail, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.detail = detail;
    this.key = key;
    this.code = code;
    this.status = status;
    this.retryAfter = retryAfter;
    this.problem = problem ?? {};
    this.message = `${detail} (${this.advice})`;
  }
  get retryable() { return false; }
  get advice() { return "see detail"; }
}

/** Another worker holds the key's lease. Retry later with the same intent. */
export class InFlight extends IdemwatchError {
  constructor(detail, { leaseUntil = null, ...opts } = {}) { super(detail, opts); this.leaseUntil = leaseUntil; }
  get retryable() { return true; }
  get advice() { return "retry later with the same intent, after retryAfter"; }
}

/** The intent was first used with other business arguments. Never retry as is. */
export class PayloadMismatch extends IdemwatchError {
  constructor(detail, { differingFields = [], storedFingerprint = null, fingerprint = null, intentKey = null, ...opts } = {}) {
    super(detail, opts);
    this.differingFields = differingFields;
    this.storedFingerprint = storedFingerprint;
    this.fingerprint = fingerprint;
    /** Set when the tool's natural key led to another intent's key (`key`): this caller's own key. */
    this.intentKey = intentKey;
    /** That first action's state (`GET /keys/{key}`), when the client could read it. */
    this.existing = null;
  }
  get advice() { return "never retry as is: a changed action needs a new intent id"; }
}

/** The provider refused definitively; every retry of this intent answers the same. */
export class OperationFailed extends IdemwatchError {
  constructor(detail, { error = "", ...opts } = {}) { super(detail, opts); this.error = error; }
  get advice() { return "do not retry: the provider refused and did nothing"; }
}

/** Nobody knows whether the effect happened. Retry with the same intent: it reconciles first. */
export class OutcomeUnknown extends IdemwatchError {
  constructor(detail, { reason = "", ...opts } = {}) { super(detail, opts); this.reason = reason; }
  get retryable() { return true; }
  get advice() { return "retry with the same intent: the guard looks the effect up before any resend"; }
}

/** The provider acted (`result`) but idemwatch could not record it: done, not yet recorded. */
export class DoneNotRecorded extends OutcomeUnknown {
  constructor(detail, { result = null, ...opts } = {}) { super(detail, opts); this.result = result; }
  get advice() { return "do not act again: it is done; the next run of the intent records it"; }
}

/** The provider forgot the key and shows no effect: a resend could act twice. Stop. */
export class NeedsHumanReview extends IdemwatchError {
  constructor(detail, { providerRetentionUntil = null, fencingToken = null, ...opts } = {}) {
    super(detail, opts);
    this.providerRetentionUntil = providerRetentionUntil;
    /** The token this worker held when it escalated: pass it to waitForPerson. */
    this.fencingToken = fencingToken;
  }
  get advice() { return "stop: a person resolves the key (waitForPerson), then run the same intent again"; }
}

/** This worker's fencing token is stale: someone took the key over and decides now. */
export class LeaseLost extends IdemwatchError {
  constructor(detail, { currentToken = null, ...opts } = {}) { super(detail, opts); this.currentToken = currentToken; }
  get advice() { return "stop: another worker owns the key; its outcome is the outcome"; }
}

/** A field is missing or malformed (`field` names it). Fix the call; do not retry it. */
export class InvalidRequest extends IdemwatchError {
  constructor(detail, { field = null, ...opts } = {}) { super(detail, opts); this.field = field; }
  get advice() { return "fix the call: a field is missing or malformed"; }
}

/** Thrown before any request when the caller gave no usable intent. */
export class IntentRequired extends InvalidRequest {
  get advice() { return "pass the intent from the orchestrator's recorded state"; }
}

/** The tool is not in the server's tools file and no default policy is configured. */
export class UnknownTool extends InvalidRequest {
  get advice() { return "declare the tool in the server's tools file"; }
}

/** The token may not call the guard, or not for this tenant or tool. */
export class Forbidden extends IdemwatchError {
  get advice() { return "use a worker token allowed for this tenant and tool"; }
}

/** 401: the token is missing or wrong (not a question of its tenants or tools). */
export class Unauthorized extends Forbidden {
  get advice() { return "the token is missing or wrong: pass a worker token from the server's auth file (new Client({url, token}), e.g. from IDEMWATCH_TOKEN)"; }
}

/** No such key (never admitted, or pruned). */
export class NotFound extends IdemwatchError {
  get advice() { return "run the intent again: there is no key to settle, reconcile or wait on"; }
}

/** idemwatch could not answer (503, another 5xx, a network error, an answer this client
 * does not know). Not a failure: retry with the same intent later. */
export class Unavailable extends IdemwatchError {
  get retryable() { return true; }
  get advice() { return "not a failure: retry with the same intent later"; }
}

/** idemwatch could not be reached to admit the call, so the provider was not called: nothing was done. */
export class NotAttempted extends Unavailable {
  get advice() { return "nothing was done: retry with the same intent later"; }
}

/** The URL does not lead to an idemwatch guard (404 on a guard route), or the answer is not idemwatch's. Retrying cannot help. */
export class ConfigurationError extends IdemwatchError {
  get advice() { return "fix the client's configuration: the idemwatch URL or its token"; }
}

const BY_CODE = {
  invalid: InvalidRequest,
  unknown_tool: UnknownTool,
  forbidden: Forbidden,
  unauthorized: Unauthorized,
  not_found: NotFound,
  in_flight: InFlight,
  needs_human_review: NeedsHumanReview,
  lease_lost: LeaseLost,
  payload_mismatch: PayloadMismatch,
  unavailable: Unavailable,
  internal: Unavailable,
  timeout: Unavailable,
  // A client bug, not a passing condition: retrying the same request cannot help.
  too_large: InvalidRequest,
  method_not_allowed: InvalidRequest,
};

/** A `Retry-After` header: delay-seconds or an HTTP date. */
export function parseRetryAfter(value, now = Date.now()) {
  if (value == null || String(value).trim() === "") return null;
  const text = String(value).trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  const when = Date.parse(text);
  return Number.isNaN(when) ? null : Math.max(0, (when - now) / 1000);
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const str = (v) => (typeof v === "string" ? v : null);

/**
 * Maps one non-2xx answer to an error. Unknown codes, 5xx and answers that are not
 * problem documents become `Unavailable` (retryable, never a failure).
 */
export function fromProblem(status, problem, { retryAfterHeader = null, key = null } = {}) {
  const doc = isObject(problem) ? problem : {};
  const code = str(doc.code);
  const detail = String(doc.detail || doc.title || `idemwatch answered HTTP ${status}`);
  let retryAfter = typeof doc.retry_after === "number" ? Math.max(0, doc.retry_after) : null;
  if (retryAfter === null) retryAfter = parseRetryAfter(retryAfterHeader);
  const common = { key: str(doc.key) ?? key, code, status, retryAfter, problem: doc };
  if (status === 404 && str(doc.key) === null) {
    // The guard's 404 always names the key it did not find; a 404 without one is a route
    // that does not exist: the URL does not lead to an idemwatch guard.
    return new ConfigurationError(`HTTP 404 from the guard route: the URL does not lead to an idemwatch guard (serve) of this version: ${detail}`, common);
  }
  const Cls = code ? BY_CODE[code] : undefined;
  if (!Cls) {
    if (status === 401) return new Unauthorized(detail, common);
    if (status === 403 && !code) return new Forbidden(detail, common);
    return new Unavailable(detail, common);
  }
  switch (Cls) {
    case InFlight:
      return new InFlight(detail, { ...common, leaseUntil: str(doc.lease_until) });
    case PayloadMismatch:
      return new PayloadMismatch(detail, {
        ...common,
        differingFields: Array.isArray(doc.differing_fields) ? doc.differing_fields.map(String) : [],
        storedFingerprint: str(doc.stored_fingerprint),
        fingerprint: str(doc.fingerprint),
        intentKey: str(doc.intent_key),
      });
    case NeedsHumanReview:
      return new NeedsHumanReview(detail, { ...common, providerRetentionUntil: str(doc.provider_retention_until) });
    case LeaseLost:
      return new LeaseLost(detail, { ...common, currentToken: Number.isInteger(doc.current_token) ? doc.current_token : null });
    case InvalidRequest:
    case UnknownTool:
      return new Cls(detail, { ...common, field: str(doc.field) });
    default:
      return new Cls(detail, common);
  }
}
