// The OpenAI Agents SDK (`@openai/agents`): a FunctionTool of `tool({name, description,
// parameters, execute})`, guarded. The run comes from the run context
// (`run(agent, input, { context })`): a run `{tenant, runId, approvals}` or an object
// with `.idemwatchRun`. Never the call id: a re-issued call carries a new one.
//
//   const refund = guardAgentsTool(tool({ name: "issue_refund", description, parameters, execute }),
//     { client, tool: "issue_refund", findByKey, objectFields: ["order"], action: "the refund", numberField: "refund_no" });
//   const status = agentsStatusTool(new StatusTool(client, [refund.agentTool]), { tool });

import { StatusTool } from "../agent.js";
import { STATUS_SCHEMA, frame, guardCall, pick, runIn, withFrame } from "./core.js";

const defaultRunOf = (runContext) => runIn(runContext?.context, "the run context");

/**
 * The same FunctionTool (name, description, parameters, strict) whose invoke runs the
 * tool's own invoke through the guard, answering with the `forModel` object as JSON.
 * `.agentTool` is the AgentTool (for a StatusTool).
 */
export function guardAgentsTool(functionTool, { client, runOf = defaultRunOf, ...options }) {
  if (typeof functionTool?.invoke !== "function") throw new TypeError("guardAgentsTool takes a FunctionTool (from tool())");
  const agentTool = guardCall(
    client,
    (args) => functionTool.invoke(frame().runContext, JSON.stringify(pick(args, options.numberField)), frame().details),
    { tool: functionTool.name, ...options },
  );
  return {
    ...functionTool,
    agentTool,
    invoke: (runContext, input, details) =>
      withFrame({ runContext, details }, async () => JSON.stringify(await agentTool.call(runOf(runContext), JSON.parse(input || "{}")))),
  };
}

/** The read-only status tool, made with the SDK's own `tool` helper. */
export function agentsStatusTool(status, { tool, runOf = defaultRunOf }) {
  return tool({
    name: StatusTool.NAME,
    description: StatusTool.DESCRIPTION,
    parameters: STATUS_SCHEMA,
    strict: false,
    execute: async (input, runContext) => JSON.stringify(await status.ask(runOf(runContext), input)),
  });
}
