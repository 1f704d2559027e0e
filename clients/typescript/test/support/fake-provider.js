// A fake payments provider on localhost, the twin of the Python suite's fake (same HTTP
// surface). It honours idempotency keys like Stripe (a known key returns the first refund
// and does nothing), counts real refunds (`effects`), and can be told to fail:
//   delay          act, then answer `seconds` later (past the client's deadline)
//   lose_response  act, then close the connection without answering
//   hang           act, then hold the connection until released
//   decline        refuse definitively (402) and do nothing
//   forget()       forget every key (its retention ran out); the refunds stay
//
//   POST /v1/refunds        Idempotency-Key header, JSON args -> 201 refund | 402 {"error"}
//   GET  /v1/refunds?idempotency_key=K                         -> 200 refund | 404
//   GET  /_effects                                             -> {"effects": [...], "calls": n}

import { createServer } from "node:http";

export class FakeProvider {
  effects = [];
  byKey = new Map();
  received = [];
  calls = 0;
  latencyMs = 0;
  #faults = [];
  #held = [];
  #server;
  url = "";

  async start() {
    this.#server = createServer((req, res) => this.#handle(req, res));
    await new Promise((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${this.#server.address().port}`;
    return this;
  }

  failNext(mode, params = {}) {
    this.#faults.push({ mode, ...params });
  }

  forget() {
    this.byKey.clear();
  }

  release() {
    for (const res of this.#held.splice(0)) res.destroy();
  }

  async close() {
    this.release();
    this.#server.closeAllConnections?.();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  refund(key, args) {
    this.calls += 1;
    this.received.push({ key, args });
    const fault = this.#faults.shift() ?? {};
    if (fault.mode === "decline") return [fault, { error: fault.error ?? "card declined" }];
    let record = this.byKey.get(key);
    if (!record) {
      record = { refund_id: `rf_${this.effects.length + 1}`, key, order: args.order ?? null, amount_p: args.amount_p ?? null };
      this.effects.push(record);
      this.byKey.set(key, record);
    }
    return [fault, record];
  }

  async #handle(req, res) {
    const url = new URL(req.url, this.url);
    const send = (status, body) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.method === "GET" && url.pathname === "/v1/refunds") {
      const found = this.byKey.get(url.searchParams.get("idempotency_key") ?? "");
      return send(found ? 200 : 404, found ?? { error: "no such refund" });
    }
    if (req.method === "GET" && url.pathname === "/_effects") return send(200, { effects: this.effects, calls: this.calls });
    if (req.method !== "POST" || url.pathname !== "/v1/refunds") return send(404, { error: "no route" });
    let text = "";
    for await (const chunk of req) text += chunk;
    const key = req.headers["idempotency-key"];
    if (!key) return send(400, { error: "Idempotency-Key is required" });
    if (this.latencyMs) await new Promise((r) => setTimeout(r, this.latencyMs));
    const [fault, record] = this.refund(key, JSON.parse(text || "{}"));
    if (fault.mode === "decline") return send(402, record);
    if (fault.mode === "delay") await new Promise((r) => setTimeout(r, (fault.seconds ?? 2) * 1000));
    if (fault.mode === "hang") return void this.#held.push(res);
    if (fault.mode === "lose_response") return void res.socket.destroy();
    return send(201, record);
  }
}
