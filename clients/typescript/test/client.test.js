// The client's transport: redirects, configuration errors and network errors, against
// small local HTTP servers (no idemwatch needed).

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { Client, ConfigurationError, Unauthorized, Unavailable } from "../src/index.js";
import { freePort } from "./support/server.js";

const KEY = "a".repeat(64);

/** A server answering every request with `answer(req, res)`; resolves to its base URL. */
async function serve(answer) {
  const server = createServer(answer);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)), server };
}

const replay = (res) => {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ decision: "replay", key: KEY, result: { refund_id: "rf_forged" }, replayed: true }));
};

test("a redirect to another origin is refused, never followed (issue 47)", async () => {
  let reached = 0;
  const other = await serve((req, res) => {
    reached += 1;
    replay(res);
  });
  const guard = await serve((req, res) => {
    res.writeHead(307, { location: `${other.url}${req.url}` });
    res.end();
  });
  try {
    const client = new Client({ url: guard.url, token: "secret" });
    await assert.rejects(
      client.admit("issue_refund", { tenant: "acme", workflowId: "r", stepId: "s", intentId: "i" }, { order: "A-1" }),
      (e) => e instanceof ConfigurationError && /another origin/.test(e.message),
    );
    assert.equal(reached, 0, "the other origin never saw the call or the token");
  } finally {
    await guard.close();
    await other.close();
  }
});

test("a redirect within the same origin is followed", async () => {
  const guard = await serve((req, res) => {
    if (req.url.startsWith("/moved")) return replay(res);
    res.writeHead(307, { location: `/moved${req.url}` });
    res.end();
  });
  try {
    const d = await new Client({ url: guard.url }).admit("t", { tenant: "a", workflowId: "r", stepId: "s", intentId: "i" }, {});
    assert.equal(d.decision, "replay");
  } finally {
    await guard.close();
  }
});

test("a 404 without a key is a configuration error; a 401 says the token is missing or wrong", async () => {
  const notGuard = await serve((req, res) => {
    res.writeHead(404, { "content-type": "text/html" });
    res.end("<h1>Not Found</h1>");
  });
  const locked = await serve((req, res) => {
    res.writeHead(401, { "content-type": "application/problem+json" });
    res.end(JSON.stringify({ status: 401, code: "unauthorized", title: "Unauthorized", detail: "no token" }));
  });
  try {
    const intent = { tenant: "a", workflowId: "r", stepId: "s", intentId: "i" };
    await assert.rejects(new Client({ url: notGuard.url }).admit("t", intent, {}), (e) => e instanceof ConfigurationError && !e.retryable);
    await assert.rejects(new Client({ url: locked.url }).admit("t", intent, {}), (e) => e instanceof Unauthorized && /missing or wrong/.test(e.message));
  } finally {
    await notGuard.close();
    await locked.close();
  }
});

test("a network error names the URL and the cause", async () => {
  const url = `http://127.0.0.1:${await freePort()}`;
  await assert.rejects(
    new Client({ url }).getKey(KEY),
    (e) => e instanceof Unavailable && e.message.includes(`${url}/api/v1/guard/keys/${KEY}`) && /ECONNREFUSED/.test(e.message),
  );
});
