// The model-facing results: one status per outcome, each saying what to do next.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ConfigurationError,
  DoneNotRecorded,
  NotAttempted,
  InFlight,
  InvalidRequest,
  LeaseLost,
  NeedsHumanReview,
  OperationFailed,
  OutcomeUnknown,
  PayloadMismatch,
  STATUSES,
  Unavailable,
  forModel,
} from "../src/index.js";

const KEY = "b".repeat(64);

test("every outcome has a status and a next step", () => {
  const values = [
    { key: KEY, result: { refund_id: "rf_1" }, replayed: false },
    { key: KEY, result: { refund_id: "rf_1" }, replayed: true },
    new OperationFailed("no", { key: KEY, error: "card declined" }),
    new OutcomeUnknown("?", { key: KEY, reason: "timeout after 10 s" }),
    new InFlight("held", { key: KEY, retryAfter: 3 }),
    new PayloadMismatch("422", { key: KEY, differingFields: ["amount_p"] }),
    new NeedsHumanReview("stop", { key: KEY }),
    new NotAttempted("down"),
    new DoneNotRecorded("?", { key: KEY, result: { refund_id: "rf_1" } }),
    new PayloadMismatch("422", { key: KEY, differingFields: ["amount_p"], intentKey: "c".repeat(64) }),
  ];
  const results = values.map((v) => forModel(v, { action: "the refund" }));
  assert.deepEqual(results.map((r) => r.status), STATUSES);
  for (const r of results) assert.match(r.next, /the refund/);
  assert.deepEqual(results[0].result, { refund_id: "rf_1" });
  assert.equal(results[2].error, "card declined");
  assert.equal(results[4].retry_after_seconds, 3);
  assert.deepEqual(results[5].differing_fields, ["amount_p"]);
  assert.match(results[3].next.toLowerCase(), /check its status/);
  assert.equal(results[3].key, KEY);
  assert.equal(results[6].key, KEY);
  assert.deepEqual(results[8].result, { refund_id: "rf_1" });
  assert.match(results[9].next, /second refund/);
});

test("unknown says calling again is safe only when the key would be the same", () => {
  const unknown = new OutcomeUnknown("?", { key: KEY, reason: "timeout after 10 s" });
  const plain = forModel(unknown, { action: "the refund" }).next;
  assert.doesNotMatch(plain, /safe/);
  assert.match(plain, /Do not call the tool again/);
  assert.match(forModel(unknown, { action: "the refund", sameKey: true }).next, /calling again with the same request is safe/);
});

test("a natural-key refusal names the first action", () => {
  const e = new PayloadMismatch("422", { key: KEY, differingFields: ["amount_p"], intentKey: "c".repeat(64) });
  e.existing = { key: KEY, status: "DONE", result: { refund_id: "rf_1" } };
  const out = forModel(e, { action: "the refund" });
  assert.equal(out.status, "already_requested");
  assert.deepEqual([out.key, out.existing_status, out.result], [KEY, "DONE", { refund_id: "rf_1" }]);
  assert.match(out.next, /it is DONE/);
  assert.match(out.next, /approves/);
});

test("a configuration error is not hidden behind a model answer", () => {
  assert.throws(() => forModel(new ConfigurationError("404")), ConfigurationError);
});

test("a guard outage is unknown for the model, never a failure", () => {
  assert.equal(forModel(new Unavailable("down")).status, "unknown");
  assert.equal(forModel(new LeaseLost("stale")).status, "in_flight");
});

test("programming errors are not hidden", () => {
  assert.throws(() => forModel(new TypeError("x")), TypeError);
  assert.throws(() => forModel(new InvalidRequest("bad", { field: "args" })), InvalidRequest);
});

test("a mismatch on a key whose outcome is unknown does not say it ran", () => {
  const unknown = new PayloadMismatch("422", {
    key: KEY,
    differingFields: ["amount_p"],
    problem: { code: "payload_mismatch", stored_status: "UNKNOWN", awaiting_person: true },
  });
  const done = new PayloadMismatch("422", { key: KEY, differingFields: ["amount_p"], problem: { stored_status: "DONE" } });
  const checking = forModel(unknown, { action: "the refund" }).next;
  assert.match(checking, /may or may not have happened; it is being checked/);
  assert.doesNotMatch(checking, /already ran/);
  assert.match(forModel(done, { action: "the refund" }).next, /already ran/);
});
