// An in-memory stand-in for `Client`, for your own unit tests (`idemwatch/testing`): the
// protocol's decisions in memory — execute, replay, stored failure, payload mismatch (with
// `intentKey` through a natural key), UNKNOWN taken over and reconciled — so your tool,
// your `classify` and your model-facing answers are tested without a server. Not the
// guard: no leases run out (`expire(key)` does it), no durability, one process. Keep a
// test against a real `idemwatch serve` too (clients/run-tests.sh shows how).
//
//   const idem = new FakeClient({ issue_refund: { freeTextFields: ["reason"], naturalKey: ["order", "refund_no"] } });
//   const refund = idem.tool("issue_refund", { execute, findByKey });

import { createHash } from "node:crypto";
import { decisionFrom, intentJson } from "./client.js";
import { InFlight, LeaseLost, NeedsHumanReview, NotFound, PayloadMismatch, UnknownTool } from "./errors.js";
import { GuardedTool } from "./tool.js";

/** SHA-256 of a value's JSON with sorted keys (the fake's stand-in for the server's canonical form). */
function digest(value) {
  const sorted = (v) =>
    v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])])) : v;
  return createHash("sha256").update(JSON.stringify(sorted(value))).digest("hex");
}

export class FakeClient {
  /** @param {Record<string, {callTimeoutSeconds?: number, freeTextFields?: string[], naturalKey?: string[]}>} tools */
  constructor(tools, { worker = "test" } = {}) {
    this.tools = tools;
    this.worker = worker;
    this.records = new Map();
    this.natural = new Map();
  }

  // --- what tests look at and do ---------------------------------------------------
  statusOf(key) {
    return this.records.get(key).status;
  }

  /** The lease of an IN_PROGRESS key ran out (its worker died): the next admit takes over. */
  expire(key) {
    this.records.get(key).status = "UNKNOWN";
  }

  /** A person decides: "done" (with `result`), "failed" or "release". */
  resolve(key, resolution, result = null) {
    const rec = this.records.get(key);
    rec.token += 1;
    rec.escalated = false;
    if (resolution === "done") Object.assign(rec, { status: "DONE", result });
    else if (resolution === "failed") Object.assign(rec, { status: "FAILED", error: "resolved as failed" });
    else Object.assign(rec, { status: "UNKNOWN", released: true });
  }

  // --- the protocol ----------------------------------------------------------------
  #policy(tool) {
    const p = this.tools[tool];
    if (!p) throw new UnknownTool(`the tool ${JSON.stringify(tool)} is not in the fake's tools`, { field: "intent.tool" });
    return p;
  }

  #execute(rec, decision = "execute", extra = {}) {
    const p = this.#policy(rec.intent.tool);
    return decisionFrom({
      decision,
      key: rec.key,
      fencing_token: rec.token,
      args: structuredClone(rec.args),
      policy: { tool: rec.intent.tool, call_timeout_seconds: p.callTimeoutSeconds ?? 10, key_retention_seconds: 86400, free_text_fields: p.freeTextFields ?? [] },
      ...extra,
    });
  }

  async admit(tool, intent, args, { businessRef } = {}) {
    const p = this.#policy(tool);
    const business = Object.fromEntries(Object.entries(args).filter(([k]) => !(p.freeTextFields ?? []).includes(k)));
    const own = digest(intentJson(tool, intent));
    let key = own;
    let via = null;
    if (p.naturalKey?.length) {
      const nk = `${intent.tenant}/${tool}/${digest(Object.fromEntries(p.naturalKey.map((f) => [f, business[f] ?? null])))}`;
      if (!this.natural.has(nk)) this.natural.set(nk, own);
      if (this.natural.get(nk) !== own) [key, via] = [this.natural.get(nk), own];
    }
    const rec = this.records.get(key);
    if (!rec) {
      const created = { key, intent: intentJson(tool, intent), businessRef: businessRef ?? null, args: business, status: "IN_PROGRESS", token: 1, result: null, error: null, escalated: false, released: false };
      this.records.set(key, created);
      return this.#execute(created);
    }
    if (digest(rec.args) !== digest(business)) {
      const fields = [...new Set([...Object.keys(rec.args), ...Object.keys(business)])].filter((k) => digest(rec.args[k] ?? null) !== digest(business[k] ?? null)).sort();
      throw new PayloadMismatch(`key ${key} was first used with other arguments`, { key, code: "payload_mismatch", status: 422, differingFields: fields, intentKey: via });
    }
    if (rec.status === "DONE") return decisionFrom({ decision: "replay", key, result: rec.result, replayed: true });
    if (rec.status === "FAILED") return decisionFrom({ decision: "failed", key, error: rec.error, replayed: true });
    if (rec.status === "IN_PROGRESS") throw new InFlight(`key ${key} is in flight`, { key, code: "in_flight", status: 409, retryAfter: 0.01 });
    if (rec.escalated) throw new NeedsHumanReview(`key ${key} needs a person`, { key, code: "needs_human_review", status: 409 });
    rec.token += 1;
    rec.status = "IN_PROGRESS";
    return this.#execute(rec, "reconcile", { previous_status: "UNKNOWN", resend_allowed: true });
  }

  #fenced(key, token) {
    const rec = this.records.get(key);
    if (!rec) throw new NotFound(`no key ${key}`, { key, code: "not_found", status: 404 });
    if (rec.token !== token || rec.status !== "IN_PROGRESS") throw new LeaseLost(`token ${token} is stale`, { key, code: "lease_lost", status: 409, currentToken: rec.token });
    return rec;
  }

  async settle(key, fencingToken, outcome, { result, error, reason } = {}) {
    const rec = this.#fenced(key, fencingToken);
    rec.status = outcome === "done" ? "DONE" : outcome === "failed" ? "FAILED" : "UNKNOWN";
    [rec.result, rec.error] = outcome === "done" ? [result ?? null, null] : [null, error ?? reason ?? null];
    return decisionFrom({ decision: "settled", key, status: rec.status });
  }

  async reconcile(key, fencingToken, lookup, { result, error } = {}) {
    const rec = this.#fenced(key, fencingToken);
    if (lookup === "found") {
      Object.assign(rec, { status: "DONE", result });
      return decisionFrom({ decision: "replay", key, result, replayed: true });
    }
    if (lookup === "not_found") return this.#execute(rec);
    rec.status = "UNKNOWN";
    return decisionFrom({ decision: "unknown", key, reason: error ?? "lookup failed" });
  }

  async getKey(key) {
    const rec = this.records.get(key);
    if (!rec) throw new NotFound(`no key ${key}`, { key, code: "not_found", status: 404 });
    return { key, status: rec.status, fencingToken: rec.token, changed: false, awaitingPerson: rec.escalated && rec.status === "UNKNOWN", releaseApproved: rec.released, result: rec.result, error: rec.error, providerRetentionUntil: null, resendSafeUntil: null, raw: {} };
  }

  async listKeys({ workflowId, businessRef, tenant, tool, limit = 20 } = {}) {
    return [...this.records.values()]
      .reverse()
      .filter((r) => (workflowId == null || r.intent.workflow_id === workflowId) && (businessRef == null || r.businessRef === businessRef) && (tenant == null || r.intent.tenant === tenant) && (tool == null || r.intent.tool === tool))
      .slice(0, limit)
      .map((r) => ({ key: r.key, status: r.status, business_ref: r.businessRef, ...r.intent }));
  }

  async waitForPerson(key) {
    return this.getKey(key);
  }

  tool(name, options) {
    return new GuardedTool(this, name, { backoffBaseMs: 10, ...options });
  }
}
