// A refund tool as an application writes it: the provider's HTTP API, guarded. `execute`
// passes the key as the provider's idempotency key and the guard's signal to fetch.

export class Declined extends Error {
  name = "Declined";
}

export const classify = (error) => (error instanceof Declined ? "definitive" : "ambiguous");

async function answer(response) {
  const body = await response.json().catch(() => ({}));
  if (response.status >= 400 && response.status < 500) throw new Declined(body.error ?? `HTTP ${response.status}`);
  if (!response.ok) throw new Error(`provider answered ${response.status}`); // 5xx: ambiguous
  return body;
}

export function refundTool(client, providerUrl, { name = "issue_refund", ...options } = {}) {
  return client.tool(name, {
    async execute(key, args, { signal }) {
      const r = await fetch(`${providerUrl}/v1/refunds`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": key },
        body: JSON.stringify(args),
        signal,
      });
      return answer(r);
    },
    async findByKey(key, { signal }) {
      const r = await fetch(`${providerUrl}/v1/refunds?idempotency_key=${encodeURIComponent(key)}`, { signal });
      if (r.status === 404) return null;
      return answer(r);
    },
    classify,
    ...options,
  });
}

/** The protocol's snake_case intent (as the Python suite passes it) in this client's shape. */
export function intentFromJson(json) {
  const i = JSON.parse(json);
  return { tenant: i.tenant, workflowId: i.workflow_id, stepId: i.step_id, intentId: i.intent_id };
}
