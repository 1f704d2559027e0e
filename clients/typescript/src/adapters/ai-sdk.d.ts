import type { AgentTool, Client, ErrorClass, JSONObject, Run, StatusTool } from "../index.js";

export interface GuardOptions {
  client: Client;
  /** The tools-file tool (default for the Agents SDK: the tool's name). */
  tool: string;
  findByKey: (key: string) => Promise<unknown> | unknown;
  classify?: (error: unknown) => ErrorClass;
  objectFields: string[];
  action?: string;
  numberField?: string | null;
  runOf?: (options: any) => Run;
}

/** The same tool (description, inputSchema), guarded; `execute` answers with the `forModel` object. */
export declare function guardAiTool<T extends { execute?: (...args: any[]) => any }>(aiTool: T, options: GuardOptions): T & { agentTool: AgentTool };
/** The read-only status tool, made with the SDK's `tool` and `jsonSchema`. */
export declare function aiStatusTool(status: StatusTool, options: { tool: (def: any) => any; jsonSchema: (schema: JSONObject) => any; runOf?: (options: any) => Run }): any;
