// `Client`: the four protocol steps of docs/GUARD.md over HTTP, one method each.

import { hostname } from "node:os";
import { ConfigurationError, Unavailable, fromProblem, parseRetryAfter } from "./errors.js";
import { GuardedTool } from "./tool.js";

const PREFIX = "/api/v1/guard";
/** The server holds a long poll for at most this many seconds. */
export const MAX_WAIT_SECONDS = 60;
export const VERSION = "0.1.0";
/** Same-origin redirects followed before giving up (a reverse proxy adding a slash). */
const MAX_REDIRECTS = 5;
/** How long a waiter pauses before asking again after idemwatch could not answer. */
const OUTAGE_PAUSE_MS = 500;

/** `host/pid`: who is calling, recorded on every attempt (never part of a key). */
export function defaultWorker() {
  return `${hostname()}/${process.pid}`;
}

const dropUndefined = (o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null));

function policyFrom(p) {
  if (!p || typeof p !== "object") return null;
  return {
    tool: String(p.tool ?? ""),
    keyRetentionSeconds: Number(p.key_retention_seconds ?? 0),
    callTimeoutSeconds: Number(p.call_timeout_seconds ?? 0),
    freeTextFields: Array.isArray(p.free_text_fields) ? p.free_text_fields.map(String) : [],
  };
}

/** A 200 answer of admit, settle or reconcile, in camelCase. `raw` keeps the JSON. */
export function decisionFrom(d) {
  return {
    decision: String(d.decision ?? ""),
    key: String(d.key ?? ""),
    fencingToken: d.fencing_token ?? null,
    leaseUntil: d.lease_until ?? null,
    args: d.args ?? null,
    policy: policyFrom(d.policy),
    result: d.result ?? null,
    error: d.error ?? null,
    reason: d.reason ?? null,
    replayed: Boolean(d.replayed),
    previousStatus: d.previous_status ?? null,
    resendAllowed: d.resend_allowed ?? null,
    resendSafeUntil: d.resend_safe_until ?? null,
    status: d.status ?? null,
    raw: d,
  };
}

function keyStateFrom(d) {
  return {
    key: String(d.key ?? ""),
    status: String(d.status ?? ""),
    fencingToken: Number(d.fencing_token ?? 0),
    changed: Boolean(d.changed),
    awaitingPerson: Boolean(d.awaiting_person),
    releaseApproved: Boolean(d.release_approved),
    result: d.result ?? null,
    error: d.error ?? null,
    providerRetentionUntil: d.provider_retention_until ?? null,
    resendSafeUntil: d.resend_safe_until ?? null,
    raw: d,
  };
}

/** The intent as the protocol spells it, with the tool's name. */
export function intentJson(tool, intent) {
  return {
    tenant: intent.tenant,
    tool,
    workflow_id: intent.workflowId,
    step_id: intent.stepId,
    intent_id: intent.intentId,
  };
}

/** The JSON object of a 2xx answer, or the error its problem document names. */
export async function check(response, key = null) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (response.ok) {
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new Unavailable(`idemwatch answered HTTP ${response.status} without a JSON object`, { status: response.status, key });
    }
    return body;
  }
  throw fromProblem(response.status, body, {
    retryAfterHeader: response.headers.get("retry-after"),
    key: key ?? response.headers.get("idempotency-key"),
  });
}

/**
 * Answered before anything was done: 429 (this caller past its rate or its requests in
 * progress) and 503 (a body not read, or a database that did not commit). The same
 * request, with the same body and key, may be sent again after `Retry-After`.
 */
const BACK_OFF = new Set([429, 503]);

/**
 * Milliseconds to wait before sending the same request again, or null to answer now: a
 * 429 or 503 with `Retry-After`, while retries are left and the wait ends before
 * `deadline` (ms). Never sooner than the server asked; a little later at random, so that
 * callers refused together do not all come back together.
 */
function backOff(response, retriesLeft, deadline) {
  if (!BACK_OFF.has(response.status) || retriesLeft <= 0) return null;
  const seconds = parseRetryAfter(response.headers.get("retry-after"));
  if (seconds === null || Date.now() + seconds * 1000 > deadline) return null;
  return seconds * 1000 + Math.random() * Math.min(250, (seconds * 1000) / 4);
}

/** `ask()`, asked again while idemwatch is unavailable (a restart) until `deadline` (ms). */
async function retrying(ask, deadline) {
  for (;;) {
    try {
      return await ask();
    } catch (e) {
      const left = deadline - Date.now();
      if (!(e instanceof Unavailable) || left <= 0) throw e;
      await new Promise((resolve) => setTimeout(resolve, Math.min(OUTAGE_PAUSE_MS, left)));
    }
  }
}

export class Client {
  /**
   * A request answered 429 or 503 with `Retry-After` is sent again, the same body and key,
   * after the time the server asked: up to `maxRetries` times, while the waits stay within
   * `maxRetryWaitMs` (docs/CLIENTS.md, "When idemwatch asks you to wait").
   * @param {{url: string, token?: string|null, worker?: string, timeoutMs?: number, fetch?: typeof fetch, maxRetries?: number, maxRetryWaitMs?: number}} options
   */
  constructor({ url, token = null, worker, timeoutMs = 10_000, fetch: fetchImpl, maxRetries = 3, maxRetryWaitMs = 30_000 } = {}) {
    if (!url) throw new TypeError("idemwatch url is required, e.g. http://127.0.0.1:8080");
    if (!(maxRetries >= 0) || !(maxRetryWaitMs >= 0)) throw new TypeError("maxRetries and maxRetryWaitMs must not be negative");
    this.url = String(url).replace(/\/+$/, "");
    this.token = token;
    this.worker = worker || defaultWorker();
    this.timeoutMs = timeoutMs;
    this.fetch = fetchImpl ?? globalThis.fetch;
    this.maxRetries = maxRetries;
    this.maxRetryWaitMs = maxRetryWaitMs;
  }

  /** One request, sent again after `Retry-After` while the bounds allow (`backOff`). */
  async #request(method, path, options = {}) {
    const deadline = Date.now() + this.maxRetryWaitMs;
    for (let retries = 0; ; retries++) {
      const response = await this.#send(method, path, options);
      const wait = backOff(response, this.maxRetries - retries, deadline);
      if (wait === null) return check(response, options.key ?? null);
      await response.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  /** One request, same-origin redirects followed: the final answer, unread. */
  async #send(method, path, { body, query, key = null, timeoutMs } = {}) {
    const headers = {
      accept: "application/json, application/problem+json",
      "user-agent": `idemwatch-js/${VERSION}`,
    };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const qs = query && Object.keys(query).length ? `?${new URLSearchParams(query)}` : "";
    let url = `${this.url}${PREFIX}${path}${qs}`;
    const signal = AbortSignal.timeout(Math.ceil(timeoutMs ?? this.timeoutMs));
    for (let hops = 0; ; hops++) {
      let response;
      try {
        // Redirects are followed here, not by fetch: one to another origin would hand the
        // token and the call to a server that is not this idemwatch, and its answer (a
        // forged replay) would be believed.
        response = await this.fetch(url, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal,
          redirect: "manual",
        });
      } catch (cause) {
        const why = cause?.cause?.code || cause?.cause?.message;
        throw new Unavailable(
          `could not reach idemwatch at ${url}: ${cause?.name ?? "Error"}: ${cause?.message ?? cause}${why ? ` (${why})` : ""}`,
          { key, cause },
        );
      }
      if (response.status < 300 || response.status >= 400 || !response.headers.get("location")) return response;
      const next = new URL(response.headers.get("location"), url);
      if (next.origin !== new URL(url).origin) {
        throw new ConfigurationError(
          `idemwatch at ${url} answered HTTP ${response.status} redirecting to another origin (${next.origin}): refused, the token and the call stay with ${new URL(url).origin}; point the client at the guard's own URL`,
          { key, status: response.status },
        );
      }
      if (hops >= MAX_REDIRECTS) {
        throw new ConfigurationError(`idemwatch at ${this.url} redirected more than ${MAX_REDIRECTS} times`, { key, status: response.status });
      }
      url = next.href;
    }
  }

  /** Step 1: claim the key, or learn its stored outcome (`POST /admit`). */
  async admit(tool, intent, args, { businessRef } = {}) {
    const body = dropUndefined({ intent: intentJson(tool, intent), business_ref: businessRef, args, worker: this.worker });
    return decisionFrom(await this.#request("POST", "/admit", { body }));
  }

  /** Step 2: report the provider call: `done` (result), `failed` (error) or `unknown` (reason). */
  async settle(key, fencingToken, outcome, { result, error, reason, durationMs } = {}) {
    const body = dropUndefined({ key, fencing_token: fencingToken, outcome, error, reason, duration_ms: durationMs, worker: this.worker });
    if (outcome === "done") body.result = result ?? null;
    return decisionFrom(await this.#request("POST", "/settle", { body, key }));
  }

  /** Step 3: report the provider lookup: `found` (result), `not_found` or `failed` (error). */
  async reconcile(key, fencingToken, lookup, { result, error, durationMs } = {}) {
    const body = dropUndefined({ key, fencing_token: fencingToken, lookup, error, duration_ms: durationMs, worker: this.worker });
    if (lookup === "found") body.result = result ?? null;
    return decisionFrom(await this.#request("POST", "/reconcile", { body, key }));
  }

  /** Step 4: the key's state; with `afterToken` and `wait` (seconds), a long poll. */
  async getKey(key, { afterToken, wait } = {}) {
    const query = {};
    if (afterToken != null) query.after_token = String(afterToken);
    // Whole seconds (the server's unit), and the request's own deadline past the wait.
    const waitSeconds = wait == null ? 0 : Math.max(1, Math.min(MAX_WAIT_SECONDS, Math.ceil(wait)));
    if (wait != null) query.wait = String(waitSeconds);
    const timeoutMs = Math.ceil(this.timeoutMs + waitSeconds * 1000);
    return keyStateFrom(await this.#request("GET", `/keys/${encodeURIComponent(key)}`, { query, key, timeoutMs }));
  }

  /**
   * Parks until a person resolves or releases `key` (or `timeoutSeconds` pass), with the
   * server's long poll. Returns the latest state: check `awaitingPerson`, then run the same
   * intent again (it replays, fails, or reconciles).
   */
  async waitForPerson(key, timeoutSeconds, { afterToken } = {}) {
    const deadline = Date.now() + timeoutSeconds * 1000;
    let state = await retrying(() => this.getKey(key), deadline);
    const token = afterToken ?? state.fencingToken;
    while (state.fencingToken === token && state.awaitingPerson) {
      const left = (deadline - Date.now()) / 1000;
      if (left <= 0) break;
      state = await retrying(() => this.getKey(key, { afterToken: token, wait: Math.min(left, MAX_WAIT_SECONDS) }), deadline);
    }
    return state;
  }

  /**
   * The keys of one run or one business object, newest first (read-only, bounded;
   * `GET /keys?workflow_id=…`): what a status tool asks.
   */
  async listKeys({ workflowId, businessRef, tenant, tool, limit } = {}) {
    if (!workflowId && !businessRef) throw new TypeError("listKeys needs workflowId or businessRef");
    const query = dropUndefined({ workflow_id: workflowId, business_ref: businessRef, tenant, tool, limit: limit == null ? undefined : String(limit) });
    return (await this.#request("GET", "/keys", { query })).keys;
  }

  /**
   * Wraps a tool of the server's tools file.
   * @param {string} name
   * @param {import("./index.js").ToolOptions} options
   */
  tool(name, options) {
    return new GuardedTool(this, name, options);
  }
}
