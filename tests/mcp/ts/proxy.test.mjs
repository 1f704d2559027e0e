// `idemwatch mcp-proxy` driven by the official TypeScript SDK's client over stdio, in
// front of the Python SDK refund server (../refund_server.py). Counts refunds at the
// upstream: exactly one per action.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const BIN = process.env.IDEMWATCH_BIN;
const PYTHON = process.env.IDEMWATCH_MCP_PYTHON ?? "python3";
const TOOLS = readFileSync(join(HERE, "..", "tools.example.toml"), "utf8");

function setup() {
  const dir = mkdtempSync(join(tmpdir(), "idemwatch-mcp-ts-"));
  writeFileSync(join(dir, "tools.toml"), TOOLS);
  return dir;
}

async function host(dir, name = "ts-host") {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ["mcp-proxy", "--tools-file", join(dir, "tools.toml"), "--database-url", `sqlite://${join(dir, "idemwatch.db")}?mode=rwc`,
      "--", PYTHON, join(HERE, "..", "refund_server.py")],
    env: { REFUND_DB: join(dir, "refunds.db"), IDEMWATCH_LOG: "warn", PATH: process.env.PATH },
    stderr: "ignore",
  });
  const client = new Client({ name, version: "1" });
  await client.connect(transport);
  return client;
}

function refunds(dir) {
  const count = execFileSync(PYTHON, ["-c",
    "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT COUNT(*) FROM refunds').fetchone()[0])",
    join(dir, "refunds.db")]);
  return Number(String(count).trim());
}

const REFUND = { order: "T-1", amount_p: 1200, reason: "damaged" };
const guard = (r) => r._meta?.["io.idemwatch/guard"] ?? {};

test("tools/list passes the upstream's tools and annotations through and adds the status tool", async () => {
  const client = await host(setup());
  const { tools } = await client.listTools();
  await client.close();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.issue_refund.annotations.destructiveHint, true);
  assert.equal(byName.idemwatch_status.annotations.readOnlyHint, true);
});

test("a retry and a re-issue from a restarted host make one refund", async () => {
  const dir = setup();
  let client = await host(dir);
  const first = await client.callTool({ name: "issue_refund", arguments: REFUND });
  const retry = await client.callTool({ name: "issue_refund", arguments: REFUND });
  await client.close();
  client = await host(dir);
  const reissue = await client.callTool({ name: "issue_refund", arguments: { ...REFUND, reason: "it broke" } });
  await client.close();
  assert.ok(!first.isError);
  assert.equal(guard(retry).replayed, true);
  assert.equal(guard(reissue).replayed, true);
  assert.deepEqual(reissue.content[0], first.content[0]);
  assert.equal(refunds(dir), 1);
});

test("SEP-3182's idempotencyKey beside the arguments scopes the action to the host's key", async () => {
  const dir = setup();
  const client = await host(dir);
  const call = (key, args) => client.request(
    { method: "tools/call", params: { name: "issue_refund", arguments: args, idempotencyKey: key } },
    CallToolResultSchema,
  );
  const init = client.getServerCapabilities();
  const a = await call("host-key-1", { order: "T-2", amount_p: 100 });
  const again = await call("host-key-1", { order: "T-2", amount_p: 100 });
  // Another order: only the host's key makes this the same action (no natural key
  // collision), so a proxy that lost the key would refund twice.
  const reused = await call("host-key-1", { order: "T-3", amount_p: 100 });
  await client.close();
  // The SDK's capability schema keeps only the members it models, so `tools.idempotency`
  // (on the wire: src/mcp/sep3182.rs's tests) does not reach here; `experimental` does.
  assert.ok(init.experimental?.idempotency, "the proxy declares the idempotency capability");
  assert.ok(!a.isError);
  assert.equal(guard(again).replayed, true);
  assert.ok(reused.isError);
  assert.match(reused.content[0].text, /differing: order/);
  assert.equal(refunds(dir), 1);
});
