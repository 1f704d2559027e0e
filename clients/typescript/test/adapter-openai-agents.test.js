// The OpenAI Agents SDK adapter against the real `@openai/agents` Runner: a scripted
// `Model` (the SDK's model interface, no network) emits the conversation's function calls
// and reads the tool outputs the Runner feeds back.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, StatusTool } from "../src/index.js";
import { agentsStatusTool, guardAgentsTool } from "../src/adapters/openai-agents.js";
import { FakeProvider } from "./support/fake-provider.js";
import { Conversation, TOOL, findRefund, framework, providerRefund } from "./support/scenario.js";
import { startServer, unavailable } from "./support/server.js";

const agents = await framework("@openai/agents");
const zod = await framework("zod");
const missing = !agents || !zod ? "*** SKIPPED (@openai/agents / zod not installed: clients/run-tests.sh installs them) ***" : null;

/** Answers each model turn from the conversation's script; records the tool outputs. */
class ScriptedModel {
  constructor(talk) {
    this.talk = talk;
    this.turn = 0;
  }

  async getResponse(request) {
    if (this.turn > 0) {
      const results = (Array.isArray(request.input) ? request.input : []).filter((i) => i.type === "function_call_result");
      const output = results.at(-1).output;
      this.talk.record(typeof output === "string" ? output : output.text);
    }
    const turns = this.talk.turns();
    let item;
    if (this.turn < turns.length) {
      const [name, args] = turns[this.turn];
      this.talk.beforeTurn(this.turn);
      this.turn += 1;
      item = { type: "function_call", id: `fc_${this.turn}`, callId: `call_${this.turn}`, name, arguments: JSON.stringify(args), status: "completed" };
    } else {
      item = { type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "All done." }] };
    }
    return { usage: new agents.Usage(), output: [item], responseId: `resp_${this.turn}` };
  }

  async *getStreamedResponse() {
    throw new Error("not used");
  }
}

describe("the OpenAI Agents SDK adapter against idemwatch serve on sqlite", { skip: missing ?? unavailable("sqlite") ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer("sqlite");
  });
  after(async () => server?.stop());

  test("a scripted Agents SDK conversation makes the intended refunds", async () => {
    const provider = await new FakeProvider().start();
    try {
      const client = new Client({ url: server.url, worker: "node-agents" });
      const talk = new Conversation(provider);
      const description = "Refund an order. amount_p is in pence; reason is what the customer said.";
      const parameters = zod.z.object({ order: zod.z.string(), amount_p: zod.z.number().int(), reason: zod.z.string().nullable().optional() });
      const execute = providerRefund(provider.url);
      const own = agents.tool({ name: TOOL, description, parameters, execute: (input) => execute(input) });
      const refund = guardAgentsTool(own, {
        client,
        findByKey: findRefund(provider.url),
        objectFields: ["order"],
        action: "the refund",
        numberField: "refund_no",
      });
      assert.equal(refund.name, TOOL);
      assert.equal(refund.description, description);
      assert.deepEqual(refund.parameters, own.parameters);
      const status = agentsStatusTool(new StatusTool(client, [refund.agentTool]), { tool: agents.tool });
      const agent = new agents.Agent({ name: "support", model: new ScriptedModel(talk), tools: [refund, status] });
      const result = await agents.run(agent, "Refund the order please", { context: talk.run, maxTurns: 10 });
      assert.equal(result.finalOutput, "All done.");
      talk.check();
    } finally {
      await provider.close();
    }
  });
});
