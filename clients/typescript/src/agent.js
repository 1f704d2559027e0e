// A guarded tool as a model calls it, and the status tool the model is told to check
// (docs/CLIENTS.md). The one rule: the intent names the action, never the turn. A model
// re-issues a call a few turns later; that call must reach the same key, so the intent is
// derived from the run and the business object (one refund of order A-88214 in this run),
// never from the turn, a step counter or the tool-call id. A genuine second action on the
// same object is approved by a person or a policy and declared by the harness
// (`run.approvals`): its own intent (`order:A-88214#2`) and, with `numberField`, its own
// natural key (`refund_no: 2`). The framework adapters are thin shells over these.

import { IdemwatchError, InvalidRequest, NotFound } from "./errors.js";
import { forModel } from "./results.js";

/** How many of an object's keys the status tool describes (newest first). */
export const STATUS_KEYS = 5;

/** `order:A-88214`: the object the action is on, from the arguments that name it. */
export function businessObject(objectFields, args) {
  return objectFields
    .map((name) => {
      const value = args?.[name];
      if (value === undefined || value === null || value === "") {
        throw new InvalidRequest(`args.${name}: names the business object and is required`, { field: `args.${name}` });
      }
      return `${name}:${value}`;
    })
    .join(",");
}

/**
 * An approval of a second (third…) action on one business object: `{number, reason, approvedBy}`.
 * @param {{number: number, reason: string, approvedBy: string}} a
 */
export function approval({ number, reason, approvedBy }) {
  if (!(number >= 2)) throw new TypeError("an approval is for a second action or later: number >= 2");
  if (!reason || !approvedBy) throw new TypeError("an approval needs a reason and who approved it");
  return Object.freeze({ number, reason, approvedBy });
}

export class AgentTool {
  /**
   * @param {import("./tool.js").GuardedTool} guarded
   * @param {{objectFields: string[], action?: string, numberField?: string|null}} options
   */
  constructor(guarded, { objectFields, action = "the action", numberField = null } = {}) {
    if (!objectFields?.length) throw new TypeError("objectFields: name the arguments that name the business object");
    this.guarded = guarded;
    this.name = guarded.name;
    this.objectFields = [...objectFields];
    this.action = action;
    this.numberField = numberField;
  }

  /** The intent, the arguments to send and the business ref of one model call in `run` ({tenant, runId, approvals?}). */
  prepare(run, args) {
    const obj = businessObject(this.objectFields, args);
    const approved = run.approvals?.[obj];
    const number = approved ? approved.number : 1;
    const sent = { ...args };
    if (this.numberField) sent[this.numberField] = number;
    if (approved) sent.approval = { reason: approved.reason, approved_by: approved.approvedBy };
    const intent = { tenant: run.tenant, workflowId: run.runId, stepId: this.name, intentId: number === 1 ? obj : `${obj}#${number}` };
    return { intent, args: sent, businessRef: obj };
  }

  #answer(value) {
    const out = forModel(value, { action: this.action, sameKey: true });
    if (value?.key && !("key" in out)) out.key = value.key;
    return out;
  }

  /** Runs the tool and answers the model (the `forModel` object). */
  async call(run, args) {
    try {
      const p = this.prepare(run, args);
      return this.#answer(await this.guarded.run(p.intent, p.args, { businessRef: p.businessRef }));
    } catch (e) {
      if (e instanceof IdemwatchError) return this.#answer(e);
      throw e;
    }
  }
}

/** One key as the model reads it: its state, the result or reason, what to do next. */
function describeKey(state, action) {
  const out = { key: state.key, status: state.status };
  if (state.status === "DONE") {
    out.result = state.result;
    out.next = `${action} happened; this is its result. Do not do it again.`;
  } else if (state.status === "FAILED") {
    out.error = state.error;
    out.next = `${action} was refused and did not happen. Do not retry it as is.`;
  } else if (state.awaitingPerson) {
    out.next = `nobody can tell whether ${action} happened; a person is checking it. Do not call the tool again; tell the user.`;
  } else if (state.status === "UNKNOWN") {
    out.next = `not known yet. Calling the tool again with the same request is safe: it looks ${action} up at the provider before acting.`;
  } else {
    out.next = `${action} is being done right now. Wait, then ask for the status again.`;
  }
  return out;
}

/** The read-only status tool for the model: given a tool and its business arguments (or a key), where the action stands. */
export class StatusTool {
  static NAME = "check_action_status";
  static DESCRIPTION =
    "Read-only: whether an action (e.g. a refund) on a business object already happened, its result or why not, and what to do next. " +
    "Give the tool name and the arguments naming the object, or the key a previous answer gave. Never performs anything.";

  constructor(client, tools) {
    this.client = client;
    this.tools = new Map(tools.map((t) => [t.name, t]));
  }

  async ask(run, { tool, args, key } = {}) {
    try {
      if (key) {
        const one = describeKey(await this.client.getKey(key), this.tools.get(tool)?.action ?? "the action");
        return { status: one.status, actions: [one], next: one.next };
      }
      const t = this.tools.get(tool ?? "");
      if (!t) throw new InvalidRequest(`tool: expected one of ${[...this.tools.keys()].join(", ")}, got ${JSON.stringify(tool)}`, { field: "tool" });
      const listed = await this.client.listKeys({ businessRef: businessObject(t.objectFields, args ?? {}), tenant: run.tenant, tool: t.name, limit: STATUS_KEYS });
      const actions = [];
      for (const k of listed) actions.push(describeKey(await this.client.getKey(k.key), t.action));
      if (!actions.length) {
        return { status: "none", actions, next: `no ${t.action.replace(/^the /, "")} was ever attempted for this object in this run's tenant: it did not happen.` };
      }
      return { status: actions[0].status, actions, next: actions[0].next };
    } catch (e) {
      if (e instanceof InvalidRequest || e instanceof NotFound) return { status: "error", next: `cannot tell: ${e.detail}` };
      if (e instanceof IdemwatchError) {
        return { status: "unavailable", next: `the status cannot be read now (${e.detail}); ask again later, and do not call the action meanwhile.` };
      }
      throw e;
    }
  }
}
