// What the TypeScript adapters share: a framework tool's own execute, guarded. The
// adapters import no framework (the package stays dependency-free): they take the tool
// your framework made and return one with the same name, description and schema.

import { AsyncLocalStorage } from "node:async_hooks";
import { AgentTool } from "../agent.js";

/** The framework's own call context (options, run context) of the call in progress. */
const frames = new AsyncLocalStorage();

/** Runs `fn` with the framework's call context `frame` (read back by `frame()`). */
export const withFrame = (frame, fn) => frames.run(frame, fn);
export const frame = () => frames.getStore();

/** The JSON schema of the status tool's arguments. */
export const STATUS_SCHEMA = {
  type: "object",
  properties: {
    tool: { type: "string", description: "The tool whose action to check." },
    args: { type: "object", description: "The arguments naming the business object (e.g. the order).", additionalProperties: true },
    key: { type: "string", description: "A key an earlier answer gave." },
  },
  additionalProperties: false,
};

/**
 * An AgentTool whose provider call is `call(args)` (the framework tool's own execute; it
 * reads the key from `currentCall()`).
 */
export function guardCall(client, call, { tool, findByKey, classify, objectFields, action, numberField, ...options }) {
  if (!tool) throw new TypeError("name the tools-file tool: { tool: 'issue_refund' }");
  const guarded = client.tool(tool, { execute: (key, args) => call(args), findByKey, classify, ...options });
  return new AgentTool(guarded, { objectFields, action, numberField });
}

/** `{tenant, runId, approvals}` itself, or an object's `idemwatchRun`. */
export function runIn(value, where) {
  const run = value && typeof value.tenant === "string" && typeof value.runId === "string" ? value : value?.idemwatchRun;
  if (!run) throw new TypeError(`idemwatch needs ${where} to be a run ({tenant, runId, approvals?}) or carry .idemwatchRun`);
  return run;
}

/** The framework's arguments without the harness's fields (number, approval) and without what the function does not take. */
export function pick(args, numberField) {
  const out = { ...args };
  if (numberField) delete out[numberField];
  delete out.approval;
  return out;
}
