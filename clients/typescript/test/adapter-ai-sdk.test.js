// The Vercel AI SDK adapter against the real `ai` 6.x: `generateText` with the SDK's own
// `MockLanguageModelV3` scripting the conversation (no network); the SDK executes the tools.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, StatusTool } from "../src/index.js";
import { aiStatusTool, guardAiTool } from "../src/adapters/ai-sdk.js";
import { FakeProvider } from "./support/fake-provider.js";
import { Conversation, TOOL, findRefund, framework, providerRefund } from "./support/scenario.js";
import { startServer, unavailable } from "./support/server.js";

const ai = await framework("ai");
const aiTest = await framework("ai/test");
const zod = await framework("zod");
const missing = !ai || !aiTest || !zod ? "*** SKIPPED (ai 6.x / zod not installed: clients/run-tests.sh installs them) ***" : null;

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

describe("the AI SDK adapter against idemwatch serve on sqlite", { skip: missing ?? unavailable("sqlite") ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer("sqlite");
  });
  after(async () => server?.stop());

  test("a scripted AI SDK conversation makes the intended refunds", async () => {
    const provider = await new FakeProvider().start();
    try {
      const client = new Client({ url: server.url, worker: "node-ai" });
      const talk = new Conversation(provider);
      const description = "Refund an order. amount_p is in pence; reason is what the customer said.";
      const inputSchema = zod.z.object({ order: zod.z.string(), amount_p: zod.z.number().int(), reason: zod.z.string().optional() });
      const refund = guardAiTool(ai.tool({ description, inputSchema, execute: providerRefund(provider.url) }), {
        client,
        tool: TOOL,
        findByKey: findRefund(provider.url),
        objectFields: ["order"],
        action: "the refund",
        numberField: "refund_no",
      });
      assert.equal(refund.description, description);
      assert.equal(refund.inputSchema, inputSchema);
      const status = aiStatusTool(new StatusTool(client, [refund.agentTool]), { tool: ai.tool, jsonSchema: ai.jsonSchema });

      let turn = 0;
      const model = new aiTest.MockLanguageModelV3({
        doGenerate: async (options) => {
          if (turn > 0) {
            const results = options.prompt.flatMap((m) => (m.role === "tool" ? m.content : []));
            const output = results.at(-1).output;
            talk.record(output.type === "json" ? output.value : output.value);
          }
          const turns = talk.turns();
          if (turn < turns.length) {
            const [toolName, input] = turns[turn];
            talk.beforeTurn(turn);
            turn += 1;
            return {
              content: [{ type: "tool-call", toolCallId: `call_${turn}`, toolName, input: JSON.stringify(input) }],
              finishReason: { unified: "tool-calls", raw: "tool_calls" },
              usage,
              warnings: [],
            };
          }
          return { content: [{ type: "text", text: "All done." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
        },
      });
      const result = await ai.generateText({
        model,
        prompt: "Refund the order please",
        tools: { [TOOL]: refund, check_action_status: status },
        stopWhen: ai.stepCountIs(10),
        experimental_context: talk.run,
      });
      assert.equal(result.text, "All done.");
      talk.check();
    } finally {
      await provider.close();
    }
  });
});
