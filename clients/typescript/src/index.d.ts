// Type declarations for the idemwatch client (hand-written; the package has no build step).

export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };
export type JSONObject = { [key: string]: JSONValue };

/**
 * What the caller meant to do, stable across every retry of that intent. The fields name
 * the action — the run and the business object (`workflowId` the run's id, `intentId`
 * "order:A-88214") — from the orchestrator's recorded state: never random, the clock, the
 * turn, a step counter or the tool-call id (a re-issued call gets a new one and acts again).
 * The tool's name comes from the guarded tool.
 */
export interface Intent {
  tenant: string;
  workflowId: string;
  stepId: string;
  intentId: string;
}

/** The tool's rules, from the server's tools file. A client cannot send or loosen them. */
export interface Policy {
  tool: string;
  keyRetentionSeconds: number;
  callTimeoutSeconds: number;
  freeTextFields: string[];
}

export type DecisionKind = "execute" | "replay" | "failed" | "reconcile" | "unknown" | "settled";

/** A 200 answer of admit, settle or reconcile: `decision` says what to do next. */
export interface Decision {
  decision: DecisionKind | string;
  key: string;
  fencingToken: number | null;
  leaseUntil: string | null;
  args: JSONObject | null;
  policy: Policy | null;
  result: JSONValue;
  error: string | null;
  reason: string | null;
  replayed: boolean;
  previousStatus: string | null;
  resendAllowed: boolean | null;
  resendSafeUntil: string | null;
  status: string | null;
  raw: JSONObject;
}

/** `GET /api/v1/guard/keys/{key}`: where a key stands. */
export interface KeyState {
  key: string;
  status: string;
  fencingToken: number;
  changed: boolean;
  awaitingPerson: boolean;
  releaseApproved: boolean;
  result: JSONValue;
  error: string | null;
  providerRetentionUntil: string | null;
  resendSafeUntil: string | null;
  raw: JSONObject;
}

/** A successful guarded call. `replayed`: the result comes from an earlier attempt. */
export interface Outcome<R = JSONValue> {
  key: string;
  result: R;
  replayed: boolean;
}

/** What the guard knows while `execute` or `findByKey` runs. Pass `signal` to `fetch`. */
export interface CallContext {
  key: string;
  fencingToken: number | null;
  timeoutSeconds: number;
  leaseUntil: string | null;
  policy: Policy | null;
  signal: AbortSignal | undefined;
}

export type ErrorClass = "definitive" | "ambiguous";

export interface ToolOptions<R = JSONValue> {
  /** Performs the effect, passing `key` to the provider as its idempotency key. */
  execute: (key: string, args: JSONObject, ctx: CallContext) => Promise<R> | R;
  /** Looks the effect up at the provider by key: the reconciliation query. `null`: none. */
  findByKey: (key: string, ctx: CallContext) => Promise<R | null | undefined> | R | null | undefined;
  /** "definitive" only for a provider's refusal (a decline, a 400/422). Default: ambiguous. */
  classify?: (error: unknown) => ErrorClass;
  /** How many times a 409 in flight is retried (honouring retryAfter). Default 3. */
  inFlightRetries?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
}

/** One row of `GET /api/v1/guard/keys?…`. */
export interface KeyListing {
  key: string;
  tenant: string;
  tool: string;
  workflow_id: string;
  step_id: string;
  intent_id: string;
  business_ref: string | null;
  status: "IN_PROGRESS" | "DONE" | "FAILED" | "UNKNOWN";
  fencing_token: number;
  attempt_count: number;
  lease_until: string;
  created_at: string;
  updated_at: string;
}

export interface ClientOptions {
  url: string;
  /** A bearer token with the `worker` role (none on a loopback server without auth). */
  token?: string | null;
  /** Who is calling, recorded on every attempt. Default `host/pid`. */
  worker?: string;
  /** Bounds each guard request (not the provider call: that is the tool's policy). */
  timeoutMs?: number;
  fetch?: typeof fetch;
  /** Retries of one request answered 429 or 503 with `Retry-After` (default 3). */
  maxRetries?: number;
  /**
   * Milliseconds one request may spend waiting on `Retry-After` in all (default 30,000):
   * a wait past it is not made, and the 429/503 is thrown (`Unavailable`, with
   * `retryAfter`) at once.
   */
  maxRetryWaitMs?: number;
}

export declare const MAX_WAIT_SECONDS: number;
export declare const VERSION: string;
export declare function defaultWorker(): string;

export declare class Client {
  constructor(options: ClientOptions);
  readonly url: string;
  readonly token: string | null;
  readonly worker: string;
  readonly maxRetries: number;
  readonly maxRetryWaitMs: number;
  admit(tool: string, intent: Intent, args: JSONObject, options?: { businessRef?: string }): Promise<Decision>;
  settle(
    key: string,
    fencingToken: number,
    outcome: "done" | "failed" | "unknown",
    options?: { result?: JSONValue; error?: string; reason?: string; durationMs?: number },
  ): Promise<Decision>;
  reconcile(
    key: string,
    fencingToken: number,
    lookup: "found" | "not_found" | "failed",
    options?: { result?: JSONValue; error?: string; durationMs?: number },
  ): Promise<Decision>;
  getKey(key: string, options?: { afterToken?: number; wait?: number }): Promise<KeyState>;
  waitForPerson(key: string, timeoutSeconds: number, options?: { afterToken?: number }): Promise<KeyState>;
  /** The keys of one run or one business object, newest first (`GET /keys?…`, at most `limit`, ≤ 100). */
  listKeys(options: { workflowId?: string; businessRef?: string; tenant?: string; tool?: string; limit?: number }): Promise<KeyListing[]>;
  tool<R = JSONValue>(name: string, options: ToolOptions<R>): GuardedTool<R>;
}

export declare class GuardedTool<R = JSONValue> {
  readonly client: Client;
  readonly name: string;
  run(intent: Intent, args: JSONObject, options?: { businessRef?: string }): Promise<Outcome<R>>;
  waitForPerson(error: NeedsHumanReview, timeoutSeconds: number): Promise<KeyState>;
}

export interface ErrorOptions {
  key?: string | null;
  code?: string | null;
  status?: number | null;
  retryAfter?: number | null;
  problem?: JSONObject | null;
  cause?: unknown;
}

export declare class IdemwatchError extends Error {
  constructor(detail: string, options?: ErrorOptions);
  readonly detail: string;
  readonly key: string | null;
  readonly code: string | null;
  readonly status: number | null;
  /** Seconds to wait before retrying the same intent, or null. */
  readonly retryAfter: number | null;
  readonly problem: JSONObject;
  /** Whether the same intent may be tried again (after retryAfter). */
  get retryable(): boolean;
  /** What to do, in one sentence. */
  get advice(): string;
}
export declare class InFlight extends IdemwatchError {
  readonly leaseUntil: string | null;
}
export declare class PayloadMismatch extends IdemwatchError {
  readonly differingFields: string[];
  readonly storedFingerprint: string | null;
  readonly fingerprint: string | null;
  /** Set when the tool's natural key led to another intent's key (`key`): this caller's own key. */
  readonly intentKey: string | null;
  /** The first action's state, when the client could read it. */
  existing: KeyState | null;
}
export declare class OperationFailed extends IdemwatchError {
  readonly error: string;
}
export declare class OutcomeUnknown extends IdemwatchError {
  readonly reason: string;
}
/** The provider acted but idemwatch could not record it: done, not yet recorded. */
export declare class DoneNotRecorded extends OutcomeUnknown {
  readonly result: JSONValue;
}
export declare class NeedsHumanReview extends IdemwatchError {
  readonly providerRetentionUntil: string | null;
  fencingToken: number | null;
}
export declare class LeaseLost extends IdemwatchError {
  readonly currentToken: number | null;
}
export declare class InvalidRequest extends IdemwatchError {
  readonly field: string | null;
}
export declare class IntentRequired extends InvalidRequest {}
export declare class UnknownTool extends InvalidRequest {}
export declare class Forbidden extends IdemwatchError {}
export declare class NotFound extends IdemwatchError {}
export declare class Unauthorized extends Forbidden {}
export declare class Unavailable extends IdemwatchError {}
/** idemwatch could not be reached to admit the call: nothing was done. */
export declare class NotAttempted extends Unavailable {}
/** A URL that is not an idemwatch guard (404 on a guard route), or a redirect to another origin. */
export declare class ConfigurationError extends IdemwatchError {}

export declare function fromProblem(
  status: number,
  problem: unknown,
  options?: { retryAfterHeader?: string | null; key?: string | null },
): IdemwatchError;
export declare function parseRetryAfter(value: string | null | undefined, now?: number): number | null;
export declare function requireIntent(intent: unknown): Intent;
/** The guarded call in progress inside `execute`/`findByKey` (or a framework tool an adapter wraps), else null. */
export declare function currentCall(): CallContext | null;
export declare function describe(error: unknown, timeoutSeconds?: number): string;
export declare function classifyError(classify: ToolOptions["classify"], error: unknown): ErrorClass;
export declare function backoffDelayMs(attempt: number, retryAfter: number | null, baseMs: number, capMs: number): number;

export type ModelStatus =
  | "done"
  | "replayed"
  | "failed"
  | "unknown"
  | "in_flight"
  | "payload_mismatch"
  | "needs_human_review"
  | "not_attempted"
  | "done_not_recorded"
  | "already_requested";
export declare const STATUSES: readonly ModelStatus[];

/** What a tool hands back to the model. */
export interface ModelResult {
  status: ModelStatus;
  next: string;
  result?: JSONValue;
  error?: string;
  differing_fields?: string[];
  retry_after_seconds?: number;
  /** The key to ask the status tool about (unknown, needs_human_review, already_requested…). */
  key?: string;
  existing_status?: string;
}
/**
 * `sameKey`: the caller derives the intent from the run and the business object, so a call
 * the model makes again reaches the same key; only then is the model told calling again is safe.
 */
export declare function forModel(value: Outcome<unknown> | unknown, options?: { action?: string; sameKey?: boolean }): ModelResult;

/** The run a model acts in, from the harness's recorded state. */
export interface Run {
  tenant: string;
  runId: string;
  /** Business object (`order:A-88214`) -> an approved extra action on it. */
  approvals?: Record<string, Approval>;
}
export interface Approval {
  readonly number: number;
  readonly reason: string;
  readonly approvedBy: string;
}
export declare function approval(a: { number: number; reason: string; approvedBy: string }): Approval;
export declare function businessObject(objectFields: string[], args: JSONObject): string;
export declare const STATUS_KEYS: number;

/** A guarded tool as a model calls it: the intent names the action (run + business object), never the turn. */
export declare class AgentTool<R = JSONValue> {
  constructor(guarded: GuardedTool<R>, options: { objectFields: string[]; action?: string; numberField?: string | null });
  readonly name: string;
  prepare(run: Run, args: JSONObject): { intent: Intent; args: JSONObject; businessRef: string };
  call(run: Run, args: JSONObject): Promise<ModelResult>;
}

/** The read-only status tool for the model. */
export declare class StatusTool {
  static readonly NAME: string;
  static readonly DESCRIPTION: string;
  constructor(client: Client, tools: AgentTool<unknown>[]);
  ask(run: Run, options: { tool?: string; args?: JSONObject; key?: string }): Promise<{ status: string; next: string; actions?: JSONObject[] }>;
}
