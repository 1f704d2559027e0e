// The guarded tool: the client's side of docs/GUARD.md, "A guarded call, as a client
// runs it". Every decision is the server's; this loop calls the provider when told to
// (execute, reconcile) and reports what happened.

import {
  DoneNotRecorded,
  IdemwatchError,
  InFlight,
  IntentRequired,
  NeedsHumanReview,
  NotAttempted,
  OperationFailed,
  OutcomeUnknown,
  PayloadMismatch,
  Unavailable,
} from "./errors.js";

import { AsyncLocalStorage } from "node:async_hooks";

const MAX_TEXT = 1000;
/** The guarded call in progress in this async context (see `currentCall`). */
const calls = new AsyncLocalStorage();

/**
 * The guarded call in progress (`{key, fencingToken, timeoutSeconds, signal, …}`) inside
 * `execute` or `findByKey`, or null outside one: what a framework's own tool function
 * reads the idempotency key from when an adapter wraps it.
 */
export function currentCall() {
  return calls.getStore() ?? null;
}
const INTENT_FIELDS = ["tenant", "workflowId", "stepId", "intentId"];

/** Refuses to run without an intent from the caller: every field a non-empty string. */
export function requireIntent(intent) {
  if (intent === null || typeof intent !== "object") {
    throw new IntentRequired(
      "a guarded call needs an intent from the orchestrator's recorded state ({tenant, workflowId, stepId, intentId})",
      { field: "intent" },
    );
  }
  for (const name of INTENT_FIELDS) {
    const value = intent[name];
    if (typeof value !== "string" || value === "") {
      throw new IntentRequired(
        `intent.${name} must be a non-empty string from the recorded run state (never random, never the clock), got ${JSON.stringify(value)}`,
        { field: `intent.${name}` },
      );
    }
  }
  return intent;
}

const isTimeout = (e) => e?.name === "TimeoutError" || e?.code === "ETIMEDOUT" || e?.code === "UND_ERR_HEADERS_TIMEOUT";

/** Why an outcome is unknown, as the server records it: `timeout after 10 s`, ... */
export function describe(error, timeoutSeconds) {
  if (isTimeout(error)) return timeoutSeconds ? `timeout after ${timeoutSeconds} s` : "timeout";
  const name = error?.name ?? "Error";
  const message = String(error?.message ?? error ?? "").trim();
  const cause = error?.cause?.code || error?.cause?.message;
  return (message ? `${name}: ${message}${cause ? ` (${cause})` : ""}` : name).slice(0, MAX_TEXT);
}

const errorText = (e) => (String(e?.message ?? e ?? "").trim() || e?.name || "Error").slice(0, MAX_TEXT);

/** Anything not known to be definitive is ambiguous: a timeout is never a failure. */
export function classifyError(classify, error) {
  if (!classify || isTimeout(error)) return "ambiguous";
  try {
    return classify(error) === "definitive" ? "definitive" : "ambiguous";
  } catch {
    return "ambiguous"; // a broken classifier must not turn an unknown into a failure
  }
}

/** Exponential backoff with jitter (ms), never sooner than the server's `retryAfter` (s). */
export function backoffDelayMs(attempt, retryAfter, baseMs, capMs) {
  const exp = Math.min(capMs, baseMs * 2 ** attempt);
  return Math.max((retryAfter ?? 0) * 1000, exp) + Math.random() * (baseMs / 2);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `fn(signal)` under a deadline; a late answer is a TimeoutError even if `fn` ignores the signal. */
async function withDeadline(timeoutSeconds, fn) {
  if (!(timeoutSeconds > 0)) return fn(undefined);
  const controller = new AbortController();
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const e = new Error(`the call took longer than ${timeoutSeconds} s`);
      e.name = "TimeoutError";
      controller.abort(e);
      reject(e);
    }, timeoutSeconds * 1000);
  });
  try {
    return await Promise.race([Promise.resolve().then(() => fn(controller.signal)), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

function terminal(d) {
  if (d.decision === "replay") return { key: d.key, result: d.result, replayed: true };
  if (d.decision === "failed") throw new OperationFailed(`key ${d.key} failed: ${d.error}`, { key: d.key, error: d.error ?? "", code: "failed" });
  if (d.decision === "unknown") throw new OutcomeUnknown(`outcome of key ${d.key} is unknown (${d.reason})`, { key: d.key, reason: d.reason ?? "", code: "unknown" });
  throw new Unavailable(`idemwatch answered a decision this client does not know: ${JSON.stringify(d.decision)}`);
}

export class GuardedTool {
  constructor(client, name, { execute, findByKey, classify, inFlightRetries = 3, backoffBaseMs = 500, backoffCapMs = 30_000 } = {}) {
    if (!name) throw new TypeError("a guarded tool needs the name it has in the server's tools file");
    if (typeof execute !== "function" || typeof findByKey !== "function") {
      throw new TypeError("a guarded tool needs execute(key, args, ctx) and findByKey(key, ctx)");
    }
    if (!(inFlightRetries >= 0)) throw new TypeError("inFlightRetries must be >= 0");
    this.client = client;
    this.name = name;
    this.execute = execute;
    this.findByKey = findByKey;
    this.classify = classify;
    this.inFlightRetries = inFlightRetries;
    this.backoffBaseMs = backoffBaseMs;
    this.backoffCapMs = backoffCapMs;
  }

  /**
   * Runs the tool for `intent` at most once. Resolves to `{key, result, replayed}` (fresh or
   * replayed) or rejects with an `IdemwatchError` that says what to do.
   */
  async run(intent, args, { businessRef } = {}) {
    requireIntent(intent);
    if (args === null || typeof args !== "object" || Array.isArray(args)) throw new TypeError("args must be a JSON object");
    let d;
    for (let attempt = 0; ; attempt++) {
      try {
        d = await this.client.admit(this.name, intent, args, { businessRef });
        break;
      } catch (e) {
        if (e instanceof PayloadMismatch && e.intentKey && e.key) {
          // A natural-key refusal names the first action: read its state for the model.
          e.existing = await this.client.getKey(e.key).catch(() => null);
          throw e;
        }
        if (e instanceof Unavailable) {
          throw new NotAttempted(`nothing was done: ${e.detail}`, { key: e.key, code: e.code, status: e.status, retryAfter: e.retryAfter, problem: e.problem, cause: e });
        }
        if (!(e instanceof InFlight) || attempt >= this.inFlightRetries) throw e;
        await this.#awaitHolder(e, attempt);
      }
    }
    for (;;) {
      if (d.decision === "execute") return this.#execute(d);
      if (d.decision === "reconcile") {
        d = await this.#reconcile(d);
        continue;
      }
      return terminal(d);
    }
  }

  /**
   * Waits for the worker holding the key to finish (the server's long poll wakes when the
   * key is settled or taken over) instead of sleeping out its lease; the backoff when the
   * key cannot be read.
   */
  async #awaitHolder(e, attempt) {
    const delayMs = backoffDelayMs(attempt, e.retryAfter, this.backoffBaseMs, this.backoffCapMs);
    if (e.key) {
      try {
        const state = await this.client.getKey(e.key);
        if (state.status === "IN_PROGRESS") await this.client.getKey(e.key, { afterToken: state.fencingToken, wait: delayMs / 1000 });
        return;
      } catch (err) {
        if (!(err instanceof IdemwatchError)) throw err;
      }
    }
    await sleep(delayMs);
  }

  #context(d, signal) {
    const timeoutSeconds = d.policy?.callTimeoutSeconds ?? 0;
    return { key: d.key, fencingToken: d.fencingToken, timeoutSeconds, leaseUntil: d.leaseUntil, policy: d.policy, signal };
  }

  async #execute(d) {
    const started = Date.now();
    const timeout = d.policy?.callTimeoutSeconds ?? 0;
    let result;
    try {
      result = await withDeadline(timeout, (signal) => {
        const ctx = this.#context(d, signal);
        return calls.run(ctx, () => this.execute(d.key, structuredClone(d.args ?? {}), ctx));
      });
    } catch (error) {
      const durationMs = Date.now() - started;
      if (classifyError(this.classify, error) === "definitive") {
        const text = errorText(error);
        await this.#settle(d, "failed", { error: text, durationMs });
        throw new OperationFailed(`${this.name} failed definitively: ${text}`, { key: d.key, error: text, code: "failed", cause: error });
      }
      const reason = describe(error, timeout);
      await this.#settle(d, "unknown", { reason, durationMs });
      throw new OutcomeUnknown(`outcome of ${this.name} key ${d.key} is unknown (${reason})`, { key: d.key, reason, code: "unknown", cause: error });
    }
    await this.#settle(d, "done", { result: result ?? null, durationMs: Date.now() - started });
    return { key: d.key, result: result ?? null, replayed: false };
  }

  async #settle(d, outcome, extra) {
    try {
      await this.client.settle(d.key, d.fencingToken, outcome, extra);
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
      // The outcome could not be recorded: the key stays claimed until its lease ends,
      // and a retry reconciles with the provider. Never a failure; a success stays one.
      if (outcome === "done") {
        throw new DoneNotRecorded(`${this.name} key ${d.key} acted but could not record it: ${e.detail}`, {
          key: d.key,
          reason: "could not record outcome done",
          code: "unknown",
          result: extra.result,
          cause: e,
        });
      }
      throw new OutcomeUnknown(`could not record outcome ${outcome} of key ${d.key}: ${e.detail}`, {
        key: d.key,
        reason: `could not record outcome ${outcome}`,
        code: "unknown",
        cause: e,
      });
    }
  }

  async #reconcile(d) {
    const started = Date.now();
    const timeout = d.policy?.callTimeoutSeconds ?? 0;
    let found;
    try {
      found = await withDeadline(timeout, (signal) => {
        const ctx = this.#context(d, signal);
        return calls.run(ctx, () => this.findByKey(d.key, ctx));
      });
    } catch (error) {
      return this.client.reconcile(d.key, d.fencingToken, "failed", { error: describe(error, timeout), durationMs: Date.now() - started });
    }
    try {
      if (found === null || found === undefined) {
        return await this.client.reconcile(d.key, d.fencingToken, "not_found", { durationMs: Date.now() - started });
      }
      return await this.client.reconcile(d.key, d.fencingToken, "found", { result: found, durationMs: Date.now() - started });
    } catch (e) {
      if (e instanceof NeedsHumanReview) e.fencingToken = d.fencingToken;
      throw e;
    }
  }

  /** Parks on the key of a NeedsHumanReview error until a person acts (see Client.waitForPerson). */
  waitForPerson(error, timeoutSeconds) {
    if (!error?.key) throw new TypeError("the error carries no key");
    return this.client.waitForPerson(error.key, timeoutSeconds, { afterToken: error.fencingToken ?? undefined });
  }
}
