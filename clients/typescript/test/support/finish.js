// Finishes a key another process (or language) left UNKNOWN: runs one guarded refund and
// prints {"result", "replayed"} (or {"error"}) as its last line. Used by the Python suite.
//   IDEMWATCH_URL, PROVIDER_URL, TOOL, INTENT (JSON, snake_case), ARGS (JSON)

import { Client, IdemwatchError } from "../../src/index.js";
import { intentFromJson, refundTool } from "./refunds.js";

const client = new Client({ url: process.env.IDEMWATCH_URL, worker: `node-${process.pid}` });
const tool = refundTool(client, process.env.PROVIDER_URL, {
  name: process.env.TOOL ?? "issue_refund",
  inFlightRetries: Number(process.env.RETRIES ?? 3),
});
try {
  const outcome = await tool.run(intentFromJson(process.env.INTENT), JSON.parse(process.env.ARGS));
  console.log(JSON.stringify({ result: outcome.result, replayed: outcome.replayed }));
} catch (e) {
  if (!(e instanceof IdemwatchError)) throw e;
  console.log(JSON.stringify({ error: e.name, detail: e.message }));
  process.exitCode = 1;
}
