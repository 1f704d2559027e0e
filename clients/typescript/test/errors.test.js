// Unit tests of the error mapping: canned problem documents (as docs/GUARD.md shows
// them) parsed into the error types. No server here: these are parser tests.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  Client,
  Forbidden,
  InFlight,
  InvalidRequest,
  LeaseLost,
  NeedsHumanReview,
  NotFound,
  OperationFailed,
  PayloadMismatch,
  Unavailable,
  UnknownTool,
  backoffDelayMs,
  classifyError,
  fromProblem,
} from "../src/index.js";
import { check } from "../src/client.js";
import { freePort } from "./support/server.js";

const KEY = "a".repeat(64);
const problem = (code, status, extra = {}) => ({
  type: `urn:idemwatch:problem:${code}`,
  title: code,
  status,
  detail: `a sentence about ${code}`,
  code,
  key: KEY,
  ...extra,
});

const CASES = [
  [problem("invalid", 400, { field: "args" }), InvalidRequest, false],
  [problem("unknown_tool", 400, { field: "intent.tool" }), UnknownTool, false],
  [problem("forbidden", 403), Forbidden, false],
  [problem("not_found", 404), NotFound, false],
  [problem("in_flight", 409, { retry_after: 7, lease_until: "2026-11-30T14:02:41Z" }), InFlight, true],
  [problem("needs_human_review", 409, { provider_retention_until: "2026-11-30T14:02:41Z" }), NeedsHumanReview, false],
  [problem("lease_lost", 409, { current_token: 3 }), LeaseLost, false],
  [problem("payload_mismatch", 422, { stored_fingerprint: "s", fingerprint: "f", differing_fields: ["amount_p"] }), PayloadMismatch, false],
  [problem("unavailable", 503, { retry_after: 2 }), Unavailable, true],
  [problem("internal", 500), Unavailable, true],
  [problem("too_large", 413), InvalidRequest, false],
];

for (const [doc, Cls, retryable] of CASES) {
  test(`${doc.code} maps to ${Cls.name}`, () => {
    const err = fromProblem(doc.status, doc);
    assert.equal(err.constructor, Cls);
    assert.equal(err.name, Cls.name);
    assert.equal(err.retryable, retryable);
    assert.equal(err.code, doc.code);
    assert.equal(err.key, KEY);
    assert.equal(err.status, doc.status);
    assert.equal(err.detail, doc.detail);
  });
}

test("code-specific members are carried", () => {
  const inFlight = fromProblem(409, CASES[4][0]);
  assert.equal(inFlight.retryAfter, 7);
  assert.equal(inFlight.leaseUntil, "2026-11-30T14:02:41Z");
  const mismatch = fromProblem(422, CASES[7][0]);
  assert.deepEqual(mismatch.differingFields, ["amount_p"]);
  assert.deepEqual([mismatch.storedFingerprint, mismatch.fingerprint], ["s", "f"]);
  assert.equal(fromProblem(409, CASES[6][0]).currentToken, 3);
  assert.equal(fromProblem(409, CASES[5][0]).providerRetentionUntil, "2026-11-30T14:02:41Z");
  assert.equal(fromProblem(400, CASES[0][0]).field, "args");
});

test("retryAfter falls back to the Retry-After header", () => {
  assert.equal(fromProblem(409, problem("in_flight", 409), { retryAfterHeader: "4" }).retryAfter, 4);
  assert.equal(fromProblem(409, problem("in_flight", 409), { retryAfterHeader: "Wed, 21 Oct 2015 07:28:00 GMT" }).retryAfter, 0);
});

test("unknown codes and 5xx are retryable and never a failure", () => {
  for (const [status, doc] of [[409, problem("some_future_code", 409)], [502, null], [500, { error: "boom" }], [504, problem("gateway_timeout", 504)]]) {
    const err = fromProblem(status, doc);
    assert.ok(err instanceof Unavailable, `${status}`);
    assert.ok(err.retryable);
    assert.ok(!(err instanceof OperationFailed));
  }
});

test("a problem response is parsed with its headers", async () => {
  const body = JSON.stringify(problem("in_flight", 409));
  const response = new Response(body, { status: 409, headers: { "content-type": "application/problem+json", "retry-after": "3" } });
  await assert.rejects(check(response), (e) => e instanceof InFlight && e.retryAfter === 3 && e.key === KEY);
});

test("an HTML error page from a proxy is Unavailable", async () => {
  const response = new Response("<html>Bad gateway</html>", { status: 502, headers: { "content-type": "text/html" } });
  await assert.rejects(check(response), (e) => e instanceof Unavailable && e.status === 502 && e.retryable);
});

test("a network error is Unavailable, not a failure", async () => {
  const client = new Client({ url: `http://127.0.0.1:${await freePort()}`, timeoutMs: 2000 });
  const intent = { tenant: "t", workflowId: "w", stepId: "1", intentId: "i" };
  await assert.rejects(client.admit("issue_refund", intent, { a: 1 }), (e) => e instanceof Unavailable && e.retryable && e.cause !== undefined);
});

test("errors say what to do", () => {
  assert.match(fromProblem(409, CASES[4][0]).message, /retry later with the same intent/);
  assert.match(fromProblem(422, CASES[7][0]).message, /never retry as is/);
});

test("only an explicit definitive verdict is a failure", () => {
  const definitive = () => "definitive";
  const timeout = Object.assign(new Error("t"), { name: "TimeoutError" });
  assert.equal(classifyError(undefined, new Error()), "ambiguous");
  assert.equal(classifyError(definitive, new Error()), "definitive");
  assert.equal(classifyError(definitive, timeout), "ambiguous");
  assert.equal(classifyError(() => { throw new Error(); }, new Error()), "ambiguous");
  assert.equal(classifyError(() => "maybe", new Error()), "ambiguous");
});

test("backoff honours retryAfter and grows", () => {
  assert.ok(backoffDelayMs(0, 5, 500, 30_000) >= 5000);
  const d = backoffDelayMs(3, null, 500, 30_000);
  assert.ok(d >= 4000 && d <= 4250);
  assert.ok(backoffDelayMs(20, null, 500, 30_000) <= 30_250);
});
