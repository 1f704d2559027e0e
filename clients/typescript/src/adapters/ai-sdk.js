// The Vercel AI SDK (`ai` 6.x; `ai` 7 needs Node 22): a tool of `tool({description,
// inputSchema, execute})`, guarded. The run comes from `experimental_context` (passed to
// generateText/streamText): a run `{tenant, runId, approvals}` or an object with
// `.idemwatchRun`. Never `toolCallId`: a re-issued call carries a new one.
//
//   const refund = guardAiTool(tool({ description, inputSchema, execute }), { client, tool: "issue_refund",
//     findByKey, objectFields: ["order"], action: "the refund", numberField: "refund_no" });
//   const status = aiStatusTool(new StatusTool(client, [refund.agentTool]), { tool, jsonSchema });

import { StatusTool } from "../agent.js";
import { STATUS_SCHEMA, frame, guardCall, pick, runIn, withFrame } from "./core.js";

const defaultRunOf = (options) => runIn(options?.experimental_context, "experimental_context");

/**
 * The same tool (description, inputSchema) whose execute runs through the guard and
 * answers the model with the `forModel` object. `.agentTool` is the AgentTool (for a StatusTool).
 */
export function guardAiTool(aiTool, { client, runOf = defaultRunOf, ...options }) {
  if (typeof aiTool?.execute !== "function") throw new TypeError("guardAiTool takes a tool with an execute function");
  const agentTool = guardCall(client, (args) => aiTool.execute(pick(args, options.numberField), frame()), options);
  return {
    ...aiTool,
    agentTool,
    execute: (input, opts) => withFrame(opts, () => agentTool.call(runOf(opts), input)),
  };
}

/** The read-only status tool, made with the SDK's own `tool` and `jsonSchema` helpers. */
export function aiStatusTool(status, { tool, jsonSchema, runOf = defaultRunOf }) {
  return tool({
    description: StatusTool.DESCRIPTION,
    inputSchema: jsonSchema(STATUS_SCHEMA),
    execute: (input, opts) => status.ask(runOf(opts), input),
  });
}
