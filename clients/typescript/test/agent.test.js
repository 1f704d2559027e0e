// The trial of issue 49 as a test: a scripted model re-issues a refund a few turns later,
// hits a timeout, asks for the status, and asks for a genuine second refund. With the
// intent derived from the run and the business object (`AgentTool`) the provider sees
// exactly the intended effects.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, afterEach, before, beforeEach, describe, test } from "node:test";
import { AgentTool, Client, StatusTool, approval } from "../src/index.js";
import { FakeProvider } from "./support/fake-provider.js";
import { refundTool } from "./support/refunds.js";
import { freePort, startServer, unavailable } from "./support/server.js";

const TOOL = "agent_refund"; // natural_key = ["order", "refund_no"] (clients/testdata/tools.toml)
const uid = () => randomUUID().slice(0, 8);

for (const backend of ["sqlite", "postgres"]) {
  const skip = unavailable(backend);
  describe(`agent tools against idemwatch serve on ${backend}`, { skip: skip ?? false }, () => {
    let server;
    let client;
    let provider;
    let refund;
    let status;
    before(async () => {
      server = await startServer(backend);
      client = new Client({ url: server.url, worker: "node-agent" });
    });
    after(async () => server?.stop());
    beforeEach(async () => {
      provider = await new FakeProvider().start();
      refund = new AgentTool(refundTool(client, provider.url, { name: TOOL }), { objectFields: ["order"], action: "the refund", numberField: "refund_no" });
      status = new StatusTool(client, [refund]);
    });
    afterEach(async () => provider.close());

    test("a re-issued call collapses and a declared second refund goes through", async () => {
      const order = `A-${uid()}`;
      const run = { tenant: "acme", runId: `run-${uid()}` };
      const args = { order, amount_p: 4500, reason: "arrived late" };

      provider.failNext("delay", { seconds: 2.5 }); // acts, answers past the 1 s timeout
      const first = await refund.call(run, args);
      assert.equal(first.status, "unknown");
      assert.match(first.next, /same request is safe/);

      const asked = await status.ask(run, { tool: TOOL, args: { order } });
      assert.equal(asked.status, "UNKNOWN");
      assert.equal(asked.actions[0].key, first.key);

      const again = await refund.call(run, { ...args, reason: "the parcel came four days late" });
      assert.equal(again.status, "replayed");
      assert.equal(again.key, first.key);

      const replanned = { tenant: "acme", runId: `run-${uid()}` };
      assert.equal((await refund.call(replanned, args)).status, "replayed");
      const refused = await refund.call(replanned, { ...args, amount_p: 3000 });
      assert.equal(refused.status, "already_requested", JSON.stringify(refused));
      assert.equal(refused.key, first.key);
      assert.equal(refused.existing_status, "DONE");
      assert.equal(refused.result.refund_id, provider.effects[0].refund_id);
      assert.equal(provider.effects.length, 1);

      const approved = { ...run, approvals: { [`order:${order}`]: approval({ number: 2, reason: "second item also damaged", approvedBy: "ops:maria" }) } };
      const second = await refund.call(approved, { ...args, amount_p: 3000 });
      assert.equal(second.status, "done");
      assert.notEqual(second.key, first.key);
      assert.equal((await refund.call(approved, { ...args, amount_p: 3000 })).status, "replayed");

      const both = await status.ask(run, { tool: TOOL, args: { order } });
      assert.deepEqual(both.actions.map((a) => a.status), ["DONE", "DONE"]);
      assert.equal(provider.effects.length, 2, "two refunds intended, two made");
    });

    test("the status tool says when nothing was attempted", async () => {
      const asked = await status.ask({ tenant: "acme", runId: "none" }, { tool: TOOL, args: { order: `A-${uid()}` } });
      assert.equal(asked.status, "none");
      assert.match(asked.next, /did not happen/);
    });
  });
}

test("a guard that cannot be reached is not attempted, never unknown", async () => {
  const provider = await new FakeProvider().start();
  try {
    const dead = new Client({ url: `http://127.0.0.1:${await freePort()}`, timeoutMs: 2000 });
    const tool = new AgentTool(refundTool(dead, provider.url, { name: TOOL }), { objectFields: ["order"], action: "the refund" });
    const answer = await tool.call({ tenant: "acme", runId: "r" }, { order: "A-1", amount_p: 1 });
    assert.equal(answer.status, "not_attempted");
    assert.equal(provider.calls, 0);
  } finally {
    await provider.close();
  }
});
