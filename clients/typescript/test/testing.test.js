// The in-memory test double: a user's tool, tested without a server, gets the same answers
// as against `idemwatch serve` (agent.test.js runs the same story there).

import assert from "node:assert/strict";
import { test } from "node:test";
import { AgentTool, StatusTool, approval } from "../src/index.js";
import { FakeClient } from "../src/testing.js";

test("the fake client runs the protocol in memory", async () => {
  const refunds = new Map();
  let failOnce = true;
  const execute = async (key, args) => {
    if (!refunds.has(key)) refunds.set(key, { refund_id: `rf_${refunds.size + 1}`, ...args });
    if (failOnce) {
      failOnce = false;
      throw new Error("reset after the provider acted");
    }
    return refunds.get(key);
  };
  const idem = new FakeClient({ issue_refund: { freeTextFields: ["reason"], naturalKey: ["order", "refund_no"] } });
  const refund = new AgentTool(idem.tool("issue_refund", { execute, findByKey: async (key) => refunds.get(key) ?? null }), {
    objectFields: ["order"],
    action: "the refund",
    numberField: "refund_no",
  });
  const run = { tenant: "acme", runId: "run-1", approvals: {} };
  const args = { order: "A-1", amount_p: 4500, reason: "late" };
  assert.equal((await refund.call(run, args)).status, "unknown");
  assert.equal((await refund.call(run, { ...args, reason: "very late" })).status, "replayed");
  const refused = await refund.call({ tenant: "acme", runId: "run-2" }, { ...args, amount_p: 10 });
  assert.equal(refused.status, "already_requested");
  assert.equal(refused.existing_status, "DONE");
  run.approvals["order:A-1"] = approval({ number: 2, reason: "second parcel lost", approvedBy: "ops:maria" });
  assert.equal((await refund.call(run, { ...args, amount_p: 10 })).status, "done");
  assert.equal(refunds.size, 2);
  const status = await new StatusTool(idem, [refund]).ask(run, { tool: "issue_refund", args: { order: "A-1" } });
  assert.deepEqual(status.actions.map((a) => a.status), ["DONE", "DONE"]);
});
