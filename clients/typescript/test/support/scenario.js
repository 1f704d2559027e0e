// The scripted conversation every framework adapter runs (issue 49's trial): a refund that
// times out after the provider acted, a status check, the model re-issuing the refund with
// other words, and a second refund a person approved. Two refunds are intended; the fake
// provider must see exactly two.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { approval, currentCall } from "../../src/index.js";

export const TOOL = "agent_refund"; // natural_key = ["order", "refund_no"] (clients/testdata/tools.toml)

/** The framework tool's own execute: the provider call, with the key from the guard. */
export function providerRefund(providerUrl) {
  return async (input) => {
    const call = currentCall();
    assert.ok(call, "the guard's call context reaches the framework's execute");
    const r = await fetch(`${providerUrl}/v1/refunds`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": call.key },
      body: JSON.stringify({ order: input.order, amount_p: input.amount_p }),
      signal: call.signal,
    });
    if (!r.ok) throw new Error(`provider answered ${r.status}`);
    return r.json();
  };
}

export function findRefund(providerUrl) {
  return async (key) => {
    const r = await fetch(`${providerUrl}/v1/refunds?idempotency_key=${encodeURIComponent(key)}`);
    return r.status === 404 ? null : r.json();
  };
}

export class Conversation {
  constructor(provider) {
    this.provider = provider;
    this.order = `A-${randomUUID().slice(0, 8)}`;
    this.run = { tenant: "acme", runId: `run-${randomUUID().slice(0, 8)}`, approvals: {} };
    this.answers = [];
  }

  /** What the scripted model asks, turn by turn: [tool name, arguments]. */
  turns() {
    return [
      [TOOL, { order: this.order, amount_p: 4500, reason: "arrived late" }],
      ["check_action_status", { tool: TOOL, args: { order: this.order } }],
      [TOOL, { order: this.order, amount_p: 4500, reason: "parcel came four days late" }],
      [TOOL, { order: this.order, amount_p: 3000, reason: "second item damaged" }],
    ];
  }

  /** The harness between turns: a slow provider first, then a person's approval. */
  beforeTurn(n) {
    if (n === 0) this.provider.failNext("delay", { seconds: 2.5 });
    if (n === 3) this.run.approvals[`order:${this.order}`] = approval({ number: 2, reason: "second item also damaged", approvedBy: "ops:maria" });
  }

  record(answer) {
    this.answers.push(typeof answer === "string" ? JSON.parse(answer) : answer);
  }

  check() {
    assert.deepEqual(this.answers.map((a) => a.status), ["unknown", "UNKNOWN", "replayed", "done"], JSON.stringify(this.answers));
    assert.match(this.answers[0].next, /same request is safe/);
    assert.equal(this.answers[2].key, this.answers[0].key);
    assert.notEqual(this.answers[3].key, this.answers[0].key);
    assert.equal(this.provider.effects.length, 2, "two refunds intended, two made");
  }
}

/** Imports a framework package, or says why not: a loud skip locally, a failure under CI. */
export async function framework(name) {
  try {
    return await import(name);
  } catch (e) {
    if (["1", "true", "yes"].includes((process.env.CI ?? "").toLowerCase())) throw e;
    return null;
  }
}
