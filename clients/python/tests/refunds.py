"""A refund tool as an application writes it: the provider's HTTP API, guarded.

Used by the tests and by ``worker.py`` (a real subprocess). ``execute`` passes the key as
the provider's idempotency key and gives its HTTP client the tool's call timeout.
"""

from __future__ import annotations

from typing import Any

import httpx

import idemwatch


class Declined(Exception):
    """The provider refused (4xx): definitive."""


def classify(exc: BaseException) -> idemwatch.ErrorClass:
    if isinstance(exc, Declined):
        return idemwatch.ErrorClass.DEFINITIVE
    return idemwatch.ErrorClass.AMBIGUOUS


def _answer(response: httpx.Response) -> Any:
    if 400 <= response.status_code < 500:
        raise Declined(response.json().get("error", f"HTTP {response.status_code}"))
    response.raise_for_status()  # 5xx: ambiguous
    return response.json()


def refund_tool(
    client: idemwatch.Client, provider_url: str, name: str = "issue_refund", **kw: Any
) -> idemwatch.GuardedTool:
    # One HTTP client per tool: building one per call (an SSL context each) costs more
    # than the 1 s call timeout on a loaded machine.
    http = httpx.Client()

    def execute(key: str, args: dict[str, Any]) -> Any:
        call = idemwatch.current_call()
        timeout = call.timeout if call else 10.0
        r = http.post(
            f"{provider_url}/v1/refunds",
            json=args,
            headers={"Idempotency-Key": key},
            timeout=timeout,
        )
        return _answer(r)

    def find_by_key(key: str) -> Any:
        r = http.get(f"{provider_url}/v1/refunds", params={"idempotency_key": key}, timeout=5)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    return client.tool(name, execute, find_by_key=find_by_key, classify=classify, **kw)


def async_refund_tool(
    client: idemwatch.AsyncClient, provider_url: str, name: str = "issue_refund", **kw: Any
) -> idemwatch.AsyncGuardedTool:
    http = httpx.AsyncClient(timeout=30)  # the guard enforces the tool's call timeout

    async def execute(key: str, args: dict[str, Any]) -> Any:
        r = await http.post(
            f"{provider_url}/v1/refunds", json=args, headers={"Idempotency-Key": key}
        )
        return _answer(r)

    async def find_by_key(key: str) -> Any:
        r = await http.get(f"{provider_url}/v1/refunds", params={"idempotency_key": key})
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    return client.tool(name, execute, find_by_key=find_by_key, classify=classify, **kw)
