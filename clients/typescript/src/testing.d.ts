import type { Client, GuardedTool, JSONValue, KeyState, ToolOptions } from "./index.js";

export interface FakePolicy {
  callTimeoutSeconds?: number;
  freeTextFields?: string[];
  naturalKey?: string[];
}

/** An in-memory stand-in for `Client` for unit tests: the protocol's decisions, no server. */
export declare class FakeClient {
  constructor(tools: Record<string, FakePolicy>, options?: { worker?: string });
  statusOf(key: string): string;
  /** The lease of an IN_PROGRESS key ran out: the next admit takes over. */
  expire(key: string): void;
  /** A person decides. */
  resolve(key: string, resolution: "done" | "failed" | "release", result?: JSONValue): void;
  getKey(key: string): Promise<KeyState>;
  tool<R = JSONValue>(name: string, options: ToolOptions<R>): GuardedTool<R>;
}
export type { Client };
