// The model-facing results: one status per outcome, each saying what to do next.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
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
  ];
  const results = values.map((v) => forModel(v, { action: "the refund" }));
  assert.deepEqual(results.map((r) => r.status), STATUSES);
  for (const r of results) assert.match(r.next, /the refund/);
  assert.deepEqual(results[0].result, { refund_id: "rf_1" });
  assert.equal(results[2].error, "card declined");
  assert.equal(results[4].retry_after_seconds, 3);
  assert.deepEqual(results[5].differing_fields, ["amount_p"]);
  assert.match(results[3].next.toLowerCase(), /check its status/);
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
