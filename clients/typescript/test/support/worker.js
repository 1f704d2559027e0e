// A worker process for the SIGKILL test: MODE=crash calls the provider, prints EFFECT once
// the refund exists, and waits to be killed before it can settle. MODE=run is finish.js.

import { Client } from "../../src/index.js";
import { intentFromJson, refundTool } from "./refunds.js";

if (process.env.MODE === "crash") {
  const client = new Client({ url: process.env.IDEMWATCH_URL, worker: `node-${process.pid}` });
  const tool = refundTool(client, process.env.PROVIDER_URL);
  const execute = tool.execute;
  tool.execute = async (key, args, ctx) => {
    const result = await execute(key, args, ctx);
    process.stdout.write("EFFECT\n", () => {
      // Killed here: after the effect, before settling. Blocking the thread keeps the
      // guard's own deadline from settling UNKNOWN first.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 600_000);
    });
    await new Promise(() => {});
    return result;
  };
  await tool.run(intentFromJson(process.env.INTENT), JSON.parse(process.env.ARGS));
} else {
  await import("./finish.js");
}
