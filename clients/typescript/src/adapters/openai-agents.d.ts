import type { AgentTool, JSONObject, Run, StatusTool } from "../index.js";
import type { GuardOptions } from "./ai-sdk.js";

/** The same FunctionTool (name, description, parameters), guarded; `invoke` answers with the `forModel` object as JSON. */
export declare function guardAgentsTool<T extends { name: string; invoke: (...args: any[]) => any }>(
  functionTool: T,
  options: Omit<GuardOptions, "tool"> & { tool?: string },
): T & { agentTool: AgentTool };
/** The read-only status tool, made with the SDK's `tool`. */
export declare function agentsStatusTool(status: StatusTool, options: { tool: (def: any) => any; runOf?: (runContext: any) => Run }): any;
export type { JSONObject };
