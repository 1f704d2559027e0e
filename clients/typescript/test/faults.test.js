// The fault cases of docs/GUARD.md against a real `idemwatch serve`, on SQLite and on
// PostgreSQL: each ends with exactly one refund at the provider (or none where it refused).

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, afterEach, before, beforeEach, describe, test } from "node:test";
import {
  Client,
  IntentRequired,
  NeedsHumanReview,
  OperationFailed,
  OutcomeUnknown,
  PayloadMismatch,
  UnknownTool,
  forModel,
} from "../src/index.js";
import { FakeProvider } from "./support/fake-provider.js";
import { refundTool } from "./support/refunds.js";
import { CI, REPO, startServer, unavailable } from "./support/server.js";

const ARGS = { order: "A-88214", amount_p: 4500, reason: "arrived late" };
// Scopes this run's intents on a shared PostgreSQL database: test scaffolding only (a real
// orchestrator takes the run id from its recorded state).
const RUN = randomUUID().slice(0, 12);
let seq = 0;
const SUPPORT = join(dirname(fileURLToPath(import.meta.url)), "support");

function run(cmd, args, env, timeoutMs = 120_000) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env: { ...process.env, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A key a person must decide: the response was lost, then the provider forgot the key. */
async function escalated(client, provider, intent) {
  const refund = refundTool(client, provider.url, { name: "forgetful_refund" }); // retention 2 s
  provider.failNext("lose_response");
  await assert.rejects(refund.run(intent, ARGS), OutcomeUnknown);
  await new Promise((r) => setTimeout(r, 2500));
  provider.forget();
  const err = await refund.run(intent, ARGS).catch((e) => e);
  assert.ok(err instanceof NeedsHumanReview, String(err));
  return { refund, err };
}

const lastJson = (text) => JSON.parse(text.trim().split("\n").at(-1));
const snake = (i) => JSON.stringify({ tenant: i.tenant, workflow_id: i.workflowId, step_id: i.stepId, intent_id: i.intentId });

for (const backend of ["sqlite", "postgres"]) {
  const skip = unavailable(backend);
  describe(`against idemwatch serve on ${backend}`, { skip: skip ?? false }, () => {
    let server;
    let client;
    let provider;
    let intent;

    before(async () => {
      server = await startServer(backend);
      client = new Client({ url: server.url, worker: "node-test" });
    });
    after(async () => server?.stop());
    beforeEach(async (t) => {
      provider = await new FakeProvider().start();
      seq += 1;
      intent = { tenant: "acme", workflowId: `js-${RUN}-${backend}`, stepId: String(seq), intentId: `refund:order-A-${seq}` };
    });
    afterEach(async () => provider.close());

    test("a timeout after the provider acted is reconciled, not resent", async () => {
      const refund = refundTool(client, provider.url);
      provider.failNext("delay", { seconds: 2.5 }); // the call timeout is 1 s
      const err = await refund.run(intent, ARGS, { businessRef: "order:A-88214" }).catch((e) => e);
      assert.ok(err instanceof OutcomeUnknown, String(err));
      assert.equal(err.reason, "timeout after 1 s");
      assert.ok(err.retryable);
      assert.equal(provider.effects.length, 1);
      const outcome = await refund.run(intent, ARGS, { businessRef: "order:A-88214" });
      assert.equal(outcome.replayed, true);
      assert.deepEqual(outcome.result, provider.effects[0]);
      assert.equal(provider.calls, 1, "reconciled by lookup, never resent");
    });

    test("a lost response is reconciled", async () => {
      const refund = refundTool(client, provider.url);
      provider.failNext("lose_response");
      await assert.rejects(refund.run(intent, ARGS), OutcomeUnknown);
      const outcome = await refund.run(intent, ARGS);
      assert.equal(outcome.replayed, true);
      assert.equal(outcome.result.refund_id, "rf_1");
      assert.equal(provider.calls, 1);
      assert.equal(provider.effects.length, 1);
    });

    test("a worker killed (SIGKILL) after the effect is reconciled on redelivery", async () => {
      const env = { IDEMWATCH_URL: server.url, PROVIDER_URL: provider.url, INTENT: snake(intent), ARGS: JSON.stringify(ARGS) };
      const worker = spawn(process.execPath, [join(SUPPORT, "worker.js")], { env: { ...process.env, ...env, MODE: "crash" } });
      await new Promise((resolve, reject) => {
        let out = "";
        worker.stdout.on("data", (d) => {
          out += d;
          if (out.includes("EFFECT")) resolve();
        });
        worker.once("exit", (code) => reject(new Error(`worker exited ${code} before the effect`)));
      });
      const exited = new Promise((r) => worker.once("exit", r));
      worker.kill("SIGKILL"); // after the effect, before settling
      await exited;
      assert.equal(provider.effects.length, 1);
      // Redelivered: 409 in flight while the dead worker's lease lives (retried, honouring
      // retryAfter), then a takeover that finds the refund at the provider.
      const again = await run(process.execPath, [join(SUPPORT, "worker.js")], { ...env, MODE: "run", RETRIES: "60" });
      assert.equal(again.code, 0, again.stdout + again.stderr);
      const answer = lastJson(again.stdout);
      assert.equal(answer.replayed, true);
      assert.deepEqual(answer.result, provider.effects[0]);
      assert.equal(provider.calls, 1);
      assert.equal(provider.effects.length, 1);
    });

    test("sixteen concurrent workers on one intent make one refund", async () => {
      provider.latencyMs = 500;
      const tools = Array.from({ length: 16 }, (_, i) =>
        refundTool(new Client({ url: server.url, worker: `worker-${i}` }), provider.url, { inFlightRetries: 20, backoffBaseMs: 100 }),
      );
      const outcomes = await Promise.all(tools.map((t) => t.run(intent, ARGS)));
      assert.equal(provider.effects.length, 1);
      assert.deepEqual(new Set(outcomes.map((o) => o.result.refund_id)), new Set(["rf_1"]));
      assert.equal(outcomes.filter((o) => !o.replayed).length, 1);
    });

    test("a redelivery after success replays", async () => {
      const refund = refundTool(client, provider.url);
      const first = await refund.run(intent, ARGS);
      const again = await refund.run(intent, ARGS);
      assert.deepEqual([first.replayed, again.replayed], [false, true]);
      assert.deepEqual(again.result, first.result);
      assert.equal(provider.calls, 1);
    });

    test("rephrased free text replays and is never sent", async () => {
      const refund = refundTool(client, provider.url);
      const first = await refund.run(intent, ARGS);
      const again = await refund.run(intent, { ...ARGS, reason: "the parcel came two weeks late" });
      assert.equal(again.replayed, true);
      assert.deepEqual(again.result, first.result);
      assert.equal(provider.calls, 1);
      assert.ok(provider.received.every((c) => !("reason" in c.args)));
    });

    test("a changed amount is refused with the differing field (422, no effect)", async () => {
      const refund = refundTool(client, provider.url);
      await refund.run(intent, ARGS);
      const err = await refund.run(intent, { ...ARGS, amount_p: 9000 }).catch((e) => e);
      assert.ok(err instanceof PayloadMismatch, String(err));
      assert.equal(err.status, 422);
      assert.deepEqual(err.differingFields, ["amount_p"]);
      assert.equal(err.retryable, false);
      assert.equal(provider.calls, 1);
      assert.equal(provider.effects.length, 1);
      assert.equal(forModel(err).status, "payload_mismatch");
    });

    test("a definitive decline is not retried and replays as the same failure", async () => {
      const refund = refundTool(client, provider.url);
      provider.failNext("decline", { error: "card declined" });
      const first = await refund.run(intent, ARGS).catch((e) => e);
      const resumed = await refund.run(intent, ARGS).catch((e) => e);
      assert.ok(first instanceof OperationFailed && resumed instanceof OperationFailed);
      assert.equal(first.error, "card declined");
      assert.equal(resumed.error, "card declined");
      assert.equal(resumed.retryable, false);
      assert.equal(provider.calls, 1);
      assert.equal(provider.effects.length, 0);
    });

    test("a retry after the provider forgot the key needs a person and never resends", async () => {
      const { refund, err } = await escalated(client, provider, intent);
      assert.equal(err.retryable, false);
      assert.equal(provider.calls, 1, "no resend after the provider's retention");
      assert.equal(provider.effects.length, 1);
      const state = await refund.waitForPerson(err, 1.5);
      assert.equal(state.awaitingPerson, true);
      assert.equal(state.status, "UNKNOWN");
      assert.equal(forModel(err).status, "needs_human_review");
    });

    test("the wrapper refuses to run without an intent", async () => {
      const refund = refundTool(client, provider.url);
      await assert.rejects(refund.run(undefined, ARGS), IntentRequired);
      const err = await refund.run({ ...intent, stepId: "" }, ARGS).catch((e) => e);
      assert.ok(err instanceof IntentRequired);
      assert.equal(err.field, "intent.stepId");
      assert.equal(provider.calls, 0);
    });

    test("an unknown tool is refused by the server", async () => {
      const refund = refundTool(client, provider.url, { name: "not_in_the_tools_file" });
      const err = await refund.run(intent, ARGS).catch((e) => e);
      assert.ok(err instanceof UnknownTool, String(err));
      assert.equal(err.status, 400);
      assert.equal(err.field, "intent.tool");
      assert.equal(provider.calls, 0);
    });

    test("a key started by TypeScript is finished by Python", async (t) => {
      const python = process.env.IDEMWATCH_PYTHON || join(REPO, "clients", "python", ".venv", "bin", "python");
      if (!existsSync(python) || spawnSync(python, ["-c", "import idemwatch"]).status !== 0) {
        if (CI) assert.fail(`CI=true but no Python with idemwatch installed at ${python}`);
        return t.skip(`*** SKIPPED (no Python with idemwatch at ${python}; set IDEMWATCH_PYTHON) ***`);
      }
      const refund = refundTool(client, provider.url);
      provider.failNext("lose_response");
      await assert.rejects(refund.run(intent, ARGS), OutcomeUnknown); // left UNKNOWN
      const done = await run(python, [join(REPO, "clients", "python", "tests", "worker.py")], {
        IDEMWATCH_URL: server.url,
        PROVIDER_URL: provider.url,
        INTENT: snake(intent),
        ARGS: JSON.stringify(ARGS),
        MODE: "run",
      });
      assert.equal(done.code, 0, done.stdout + done.stderr);
      const answer = lastJson(done.stdout);
      assert.equal(answer.replayed, true);
      assert.deepEqual(answer.result, provider.effects[0]);
      assert.equal(provider.calls, 1);
      assert.equal(provider.effects.length, 1);
    });
  });
}

/** A person resolving on the page: the local admin, with its CSRF cookie and token. */
async function person(url, key, body) {
  const csrf = await fetch(`${url}/api/v1/csrf`);
  const cookie = csrf.headers.getSetCookie().map((c) => c.split(";")[0]).join("; ");
  const { csrf_token: token } = await csrf.json();
  return fetch(`${url}/api/v1/keys/${key}/resolve`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-csrf-token": token, cookie },
    body: JSON.stringify(body),
  });
}

test("waitForPerson survives a serve restart (issue 49)", { skip: unavailable("sqlite") ?? false }, async () => {
  let server = await startServer("sqlite");
  const provider = await new FakeProvider().start();
  try {
    const client = new Client({ url: server.url, worker: "waiter" });
    const intent = { tenant: "acme", workflowId: `js-${RUN}-restart`, stepId: "1", intentId: "refund:order-restart" };
    const { refund, err } = await escalated(client, provider, intent);
    let ended = false;
    const waiting = refund.waitForPerson(err, 60).finally(() => (ended = true));
    await new Promise((r) => setTimeout(r, 300));
    // serve dies under the waiter (SIGKILL: a graceful stop would wait for the long poll)
    // and starts again on the same database and port; a person decides on the new one.
    await server.kill();
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(ended, false, "the wait outlived the restart");
    server = await startServer("sqlite", { port: server.port, dir: server.dir });
    const done = await person(server.url, err.key, {
      resolution: "done",
      reason: "found it at the provider",
      evidence: "rf_1",
      result: { refund_id: "rf_1" },
    });
    assert.equal(done.status, 200, await done.text());
    const state = await waiting;
    assert.equal(state.status, "DONE");
    assert.equal(state.awaitingPerson, false);
    assert.equal(provider.calls, 1, "no resend");
  } finally {
    await server.stop();
    await provider.close();
  }
});
