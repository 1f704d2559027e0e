// A caller past its bounds is answered 429 with `Retry-After`; the client waits that long
// and sends the same request again (bounded: `maxRetries`, `maxRetryWaitMs`). Against a
// real `serve` with `--guard-rate-per-token 1`: one request a second, so a guarded call
// (admit, then settle at once) meets a real 429.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Client, Unavailable } from "../src/index.js";
import { FakeProvider } from "./support/fake-provider.js";
import { refundTool } from "./support/refunds.js";
import { startServer, unavailable } from "./support/server.js";

const ARGS = { order: "A-1", amount_p: 4500, reason: "arrived late" };
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

/** A `fetch` that records what went over the wire: each request and its answer. */
function wire() {
  const log = [];
  const recording = async (url, init) => {
    const entry = { sentAt: Date.now(), method: init?.method ?? "GET", path: new URL(url).pathname };
    log.push(entry);
    const response = await fetch(url, init);
    Object.assign(entry, { status: response.status, retryAfter: response.headers.get("retry-after"), answeredAt: Date.now() });
    return response;
  };
  return { log, fetch: recording };
}

/** A 429 with Retry-After was met, each request after one was the same request sent no sooner than asked, and the last answer is a success. */
function assertWaitedAsAsked(log) {
  const refused = log.flatMap((e, i) => (e.status === 429 ? [i] : []));
  assert.ok(refused.length > 0, `no 429 met: ${JSON.stringify(log)}`);
  for (const i of refused) {
    const seconds = Number(log[i].retryAfter);
    assert.ok(seconds >= 1, JSON.stringify(log[i]));
    const again = log[i + 1];
    assert.equal(`${again.method} ${again.path}`, `${log[i].method} ${log[i].path}`, "the same request again");
    assert.ok(again.sentAt - log[i].answeredAt >= seconds * 1000, JSON.stringify(log));
  }
  assert.equal(log.at(-1).status, 200, JSON.stringify(log));
}

for (const backend of ["sqlite", "postgres"]) {
  const skip = unavailable(backend);
  describe(`past --guard-rate-per-token on ${backend}`, { skip: skip ?? false }, () => {
    let server;
    before(async () => {
      server = await startServer(backend, { extra: ["--guard-rate-per-token", "1"] });
    });
    after(async () => server?.stop());

    test("a guarded call past the rate waits as asked and succeeds", async () => {
      const provider = await new FakeProvider().start();
      try {
        const { log, fetch } = wire();
        const client = new Client({ url: server.url, worker: "rate", fetch });
        const run = randomUUID().slice(0, 12);
        const intent = { tenant: "acme", workflowId: `rate-${run}`, stepId: "1", intentId: `refund:order-${run}` };
        const outcome = await refundTool(client, provider.url).run(intent, ARGS);
        assert.equal(outcome.replayed, false);
        assert.equal(provider.calls, 1);
        assertWaitedAsAsked(log);
        assert.deepEqual(log.slice(-2).map((e) => e.path), ["/api/v1/guard/settle", "/api/v1/guard/settle"]);
        // Recorded once: the key is DONE (this read may itself wait for the rate).
        assert.equal((await client.getKey(outcome.key)).status, "DONE");
      } finally {
        await provider.close();
      }
    });

    test("the backoff is bounded by retries and by the wait allowed", async () => {
      for (const bounds of [{ maxRetries: 0 }, { maxRetryWaitMs: 500 }]) {
        await pause(1100); // a full bucket: the first request passes, the second is refused
        const { log, fetch } = wire();
        const client = new Client({ url: server.url, fetch, ...bounds });
        await client.listKeys({ workflowId: "nobody" });
        const err = await client.listKeys({ workflowId: "nobody" }).catch((e) => e);
        assert.ok(err instanceof Unavailable, String(err));
        assert.equal(err.status, 429);
        assert.ok(err.retryAfter >= 1, JSON.stringify(bounds));
        assert.equal(log.length, 2, `${JSON.stringify(bounds)}: not sent again: ${JSON.stringify(log)}`);
      }
    });
  });
}
