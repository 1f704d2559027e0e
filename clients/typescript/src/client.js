// `Client`: the four protocol steps of docs/GUARD.md over HTTP, one method each.

import { hostname } from "node:os";
import { Unavailable, fromProblem } from "./errors.js";
import { GuardedTool } from "./tool.js";

const PREFIX = "/api/v1/guard";
/** The server holds a long poll for at most this many seconds. */
export const MAX_WAIT_SECONDS = 60;
export const VERSION = "0.1.0";

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

export class Client {
  /**
   * @param {{url: string, token?: string|null, worker?: string, timeoutMs?: number, fetch?: typeof fetch}} options
   */
  constructor({ url, token = null, worker, timeoutMs = 10_000, fetch: fetchImpl } = {}) {
    if (!url) throw new TypeError("idemwatch url is required, e.g. http://127.0.0.1:8080");
    this.url = String(url).replace(/\/+$/, "");
    this.token = token;
    this.worker = worker || defaultWorker();
    this.timeoutMs = timeoutMs;
    this.fetch = fetchImpl ?? globalThis.fetch;
  }

  async #request(method, path, { body, query, key = null, timeoutMs } = {}) {
    const headers = {
      accept: "application/json, application/problem+json",
      "user-agent": `idemwatch-js/${VERSION}`,
    };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const qs = query && Object.keys(query).length ? `?${new URLSearchParams(query)}` : "";
    let response;
    try {
      response = await this.fetch(`${this.url}${PREFIX}${path}${qs}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs ?? this.timeoutMs),
      });
    } catch (cause) {
      throw new Unavailable(`could not reach idemwatch: ${cause?.name ?? "Error"}: ${cause?.message ?? cause}`, { key, cause });
    }
    return check(response, key);
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
    if (wait != null) query.wait = String(Math.max(1, Math.min(MAX_WAIT_SECONDS, Math.ceil(wait))));
    const timeoutMs = this.timeoutMs + (wait ?? 0) * 1000;
    return keyStateFrom(await this.#request("GET", `/keys/${encodeURIComponent(key)}`, { query, key, timeoutMs }));
  }

  /**
   * Parks until a person resolves or releases `key` (or `timeoutSeconds` pass), with the
   * server's long poll. Returns the latest state: check `awaitingPerson`, then run the same
   * intent again (it replays, fails, or reconciles).
   */
  async waitForPerson(key, timeoutSeconds, { afterToken } = {}) {
    const deadline = Date.now() + timeoutSeconds * 1000;
    let state = await this.getKey(key);
    const token = afterToken ?? state.fencingToken;
    while (state.fencingToken === token && state.awaitingPerson) {
      const left = (deadline - Date.now()) / 1000;
      if (left <= 0) break;
      state = await this.getKey(key, { afterToken: token, wait: Math.min(left, MAX_WAIT_SECONDS) });
    }
    return state;
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
