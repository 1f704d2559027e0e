"""``Client`` and ``AsyncClient``: the four protocol steps over HTTP, one method each.

The twins share everything but the transport: requests are built and answers parsed by
the module-level helpers, so the sync and async clients cannot disagree.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import socket
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import quote

import httpx

from . import __version__
from ._errors import (
    ConfigurationError,
    IdemwatchError,
    InvalidRequest,
    Unavailable,
    from_problem,
    parse_retry_after,
)
from ._types import JSON, Decision, ErrorClass, Intent, KeyState

_PREFIX = "/api/v1/guard"
#: The server holds a long poll for at most this many seconds.
MAX_WAIT_SECONDS = 60

def default_worker() -> str:
    """``host/pid``: who is calling, recorded on every attempt (never part of a key)."""
    return f"{socket.gethostname()}/{os.getpid()}"


def _headers(token: str | None) -> dict[str, str]:
    headers = {
        "Accept": "application/json, application/problem+json",
        "User-Agent": f"idemwatch-python/{__version__}",
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _json_value(value: Any, where: str) -> Any:
    """``value`` with every ``Decimal`` made a JSON number: a whole one as an int, another
    as the float that writes the same digits. A Decimal no float writes exactly (more
    digits than a double keeps) is refused by name: sent rounded, it would fingerprint
    and pay a different amount."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidRequest(f"{where}: {value!r} is not a JSON number", field=where)
        if value == value.to_integral_value():
            return int(value)
        as_float = float(value)
        if Decimal(repr(as_float)) != value:
            raise InvalidRequest(
                f"{where}: {value!r} has more digits than a JSON number keeps exactly; send "
                f"the amount in minor units (an int, e.g. pence) or as a string",
                field=where,
            )
        return as_float
    if isinstance(value, Mapping):
        return {k: _json_value(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _admit_body(
    tool: str, intent: Intent, args: Mapping[str, JSON], business_ref: str | None, worker: str
) -> dict[str, Any]:
    return _drop_none(
        {
            "intent": intent.to_json(tool),
            "business_ref": business_ref,
            "args": _json_value(dict(args), "args"),
            "worker": worker,
        }
    )


def _check(response: httpx.Response, key: str | None = None) -> dict[str, Any]:
    """The JSON object of a 2xx answer, or the error its problem document names."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        body = None
    if response.is_redirect:
        # Never followed: a redirect could hand the token and the call to another server,
        # whose answer (a forged replay) would be believed. Retrying cannot help either.
        raise ConfigurationError(
            f"idemwatch at {response.request.url} answered HTTP {response.status_code} redirecting "
            f"to {response.headers.get('Location')!r}: refused; point the client at the guard's "
            f"own URL",
            status=response.status_code,
            key=key,
        )
    if response.is_success:
        if not isinstance(body, dict):
            raise Unavailable(
                f"idemwatch answered HTTP {response.status_code} without a JSON object",
                status=response.status_code,
                key=key,
            )
        return body
    raise from_problem(
        response.status_code,
        body if isinstance(body, dict) else None,
        retry_after_header=response.headers.get("Retry-After"),
        key=key or response.headers.get("Idempotency-Key"),
    )


def _network_error(exc: httpx.HTTPError, key: str | None) -> Unavailable:
    return Unavailable(f"could not reach idemwatch: {type(exc).__name__}: {exc}", key=key)


#: Answered before anything was done: 429 (this caller past its rate or its requests in
#: progress) and 503 (a body not read, or a database that did not commit). The same
#: request, with the same body and key, may be sent again after ``Retry-After``.
_BACK_OFF = (429, 503)


def _back_off(response: httpx.Response, retries_left: int, deadline: float) -> float | None:
    """Seconds to wait before sending the same request again, or None to answer now: a
    429 or 503 with ``Retry-After``, while retries are left and the wait ends before
    ``deadline`` (``time.monotonic()``). Never sooner than the server asked; a little
    later at random, so that callers refused together do not all come back together."""
    if response.status_code not in _BACK_OFF or retries_left <= 0:
        return None
    wait = parse_retry_after(response.headers.get("Retry-After"))
    if wait is None or time.monotonic() + wait > deadline:
        return None
    return wait + random.uniform(0, min(0.25, wait / 4))


class _Base:
    def __init__(
        self,
        url: str,
        token: str | None,
        worker: str | None,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
    ) -> None:
        if not url:
            raise ValueError("idemwatch url is required, e.g. http://127.0.0.1:8080")
        if max_retries < 0 or max_retry_wait < 0:
            raise ValueError("max_retries and max_retry_wait must not be negative")
        self.url = url.rstrip("/")
        self.token = token
        self.worker = worker or default_worker()
        #: Retries of one request answered 429 or 503 with ``Retry-After``.
        self.max_retries = max_retries
        #: Seconds one request may spend waiting on ``Retry-After`` in all: a wait past
        #: it is not made, and the 429/503 is raised (:class:`Unavailable`, with
        #: ``retry_after``) at once.
        self.max_retry_wait = max_retry_wait

    def _send_args(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, Any] | None,
        timeout: float | None,
        default_timeout: float,
    ) -> dict[str, Any]:
        """What one guard request sends, for either transport (sent again as is)."""
        return {
            "method": method,
            "url": self.url + _PREFIX + path,
            "json": body,
            "params": params,
            "headers": _headers(self.token),
            "timeout": timeout if timeout is not None else default_timeout,
        }


class Client(_Base):
    """A synchronous idemwatch guard client.

    >>> client = Client("http://127.0.0.1:8080", token=os.environ.get("IDEMWATCH_TOKEN"))

    ``http_client`` lets you bring your own ``httpx.Client`` (proxies, TLS, transports);
    its base URL and headers are left alone. ``timeout`` bounds each guard request
    (not the provider call: that is the tool's policy). A request answered 429 or 503
    with ``Retry-After`` is sent again, the same body and key, after the time the server
    asked: up to ``max_retries`` times, while the waits stay within ``max_retry_wait``
    seconds (docs/CLIENTS.md, "When idemwatch asks you to wait").
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        worker: str | None = None,
        timeout: float = 10.0,
        http_client: httpx.Client | None = None,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
    ) -> None:
        super().__init__(url, token, worker, max_retries, max_retry_wait)
        self._timeout = timeout
        self._http = http_client or httpx.Client(timeout=timeout)
        self._owns_http = http_client is None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        sent = self._send_args(method, path, body, params, timeout, self._timeout)
        deadline = time.monotonic() + self.max_retry_wait
        for retries in itertools.count():
            try:
                response = self._http.request(**sent)
            except httpx.HTTPError as exc:
                raise _network_error(exc, key) from exc
            wait = _back_off(response, self.max_retries - retries, deadline)
            if wait is None:
                return _check(response, key)
            time.sleep(wait)
        raise AssertionError("unreachable")

    def admit(
        self,
        tool: str,
        intent: Intent,
        args: Mapping[str, JSON],
        *,
        business_ref: str | None = None,
    ) -> Decision:
        """Step 1: claim the key, or learn its stored outcome (``POST /admit``)."""
        body = _admit_body(tool, intent, args, business_ref, self.worker)
        return Decision.from_json(self._request("POST", "/admit", body=body))

    def settle(
        self,
        key: str,
        fencing_token: int,
        outcome: str,
        *,
        result: JSON = None,
        error: str | None = None,
        reason: str | None = None,
        duration_ms: int | None = None,
    ) -> Decision:
        """Step 2: report the provider call: ``done`` (result), ``failed`` (error) or
        ``unknown`` (reason)."""
        body = _drop_none(
            {
                "key": key,
                "fencing_token": fencing_token,
                "outcome": outcome,
                "error": error,
                "reason": reason,
                "duration_ms": duration_ms,
                "worker": self.worker,
            }
        )
        if outcome == "done":
            body["result"] = _json_value(result, "result")
        return Decision.from_json(self._request("POST", "/settle", body=body, key=key))

    def reconcile(
        self,
        key: str,
        fencing_token: int,
        lookup: str,
        *,
        result: JSON = None,
        error: str | None = None,
        duration_ms: int | None = None,
    ) -> Decision:
        """Step 3: report the provider lookup: ``found`` (result), ``not_found`` or
        ``failed`` (error)."""
        body = _drop_none(
            {
                "key": key,
                "fencing_token": fencing_token,
                "lookup": lookup,
                "error": error,
                "duration_ms": duration_ms,
                "worker": self.worker,
            }
        )
        if lookup == "found":
            body["result"] = _json_value(result, "result")
        return Decision.from_json(self._request("POST", "/reconcile", body=body, key=key))

    def get_key(
        self, key: str, *, after_token: int | None = None, wait: float | None = None
    ) -> KeyState:
        """Step 4: the key's state; with ``after_token`` and ``wait``, a long poll."""
        params = _drop_none({"after_token": after_token, "wait": _wait_param(wait)})
        timeout = self._timeout + (wait or 0)
        data = self._request(
            "GET", f"/keys/{quote(key, safe='')}", params=params or None, key=key, timeout=timeout
        )
        return KeyState.from_json(data)

    def list_keys(
        self,
        *,
        workflow_id: str | None = None,
        business_ref: str | None = None,
        tenant: str | None = None,
        tool: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """The keys of one run or one business object, newest first (read-only, bounded;
        ``GET /keys?workflow_id=…``): what a status tool asks."""
        params = _list_params(workflow_id, business_ref, tenant, tool, limit)
        return list(self._request("GET", "/keys", params=params)["keys"])

    def wait_for_person(
        self, key: str, timeout: float, *, after_token: int | None = None
    ) -> KeyState:
        """Parks until a person resolves or releases ``key`` (or ``timeout`` seconds pass),
        with the server's long poll. Returns the latest state: check ``awaiting_person``,
        then run the same intent again (it replays, fails, or reconciles)."""
        deadline = time.monotonic() + timeout
        state = _retrying(lambda: self.get_key(key), deadline, time.sleep)
        if after_token is None:
            after_token = state.fencing_token
        while state.fencing_token == after_token and state.awaiting_person:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait = min(left, MAX_WAIT_SECONDS)
            state = _retrying(
                lambda: self.get_key(key, after_token=after_token, wait=wait), deadline, time.sleep
            )
        return state

    def tool(
        self,
        name: str,
        execute: Callable[[str, dict[str, JSON]], JSON],
        *,
        find_by_key: Callable[[str], JSON],
        classify: Callable[[BaseException], ErrorClass | str] | None = None,
        in_flight_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> GuardedTool:
        """Wraps ``execute(key, args)`` for the tool ``name`` (a tool of the server's tools file)."""
        from ._tool import GuardedTool

        return GuardedTool(
            self,
            name,
            execute,
            find_by_key=find_by_key,
            classify=classify,
            in_flight_retries=in_flight_retries,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
        )

    def guard(
        self,
        name: str,
        *,
        find_by_key: Callable[[str], JSON],
        classify: Callable[[BaseException], ErrorClass | str] | None = None,
        in_flight_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> Callable[[Callable[[str, dict[str, JSON]], JSON]], GuardedTool]:
        """Decorator form of :meth:`tool`: ``@client.guard("issue_refund", find_by_key=...)``."""

        def wrap(execute: Callable[[str, dict[str, JSON]], JSON]) -> GuardedTool:
            return self.tool(
                name,
                execute,
                find_by_key=find_by_key,
                classify=classify,
                in_flight_retries=in_flight_retries,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
            )

        return wrap


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`; every method is a coroutine."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        worker: str | None = None,
        timeout: float = 10.0,
        http_client: httpx.AsyncClient | None = None,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
    ) -> None:
        super().__init__(url, token, worker, max_retries, max_retry_wait)
        self._timeout = timeout
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._owns_http = http_client is None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        sent = self._send_args(method, path, body, params, timeout, self._timeout)
        deadline = time.monotonic() + self.max_retry_wait
        for retries in itertools.count():
            try:
                response = await self._http.request(**sent)
            except httpx.HTTPError as exc:
                raise _network_error(exc, key) from exc
            wait = _back_off(response, self.max_retries - retries, deadline)
            if wait is None:
                return _check(response, key)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def admit(
        self,
        tool: str,
        intent: Intent,
        args: Mapping[str, JSON],
        *,
        business_ref: str | None = None,
    ) -> Decision:
        body = _admit_body(tool, intent, args, business_ref, self.worker)
        return Decision.from_json(await self._request("POST", "/admit", body=body))

    async def settle(
        self,
        key: str,
        fencing_token: int,
        outcome: str,
        *,
        result: JSON = None,
        error: str | None = None,
        reason: str | None = None,
        duration_ms: int | None = None,
    ) -> Decision:
        body = _drop_none(
            {
                "key": key,
                "fencing_token": fencing_token,
                "outcome": outcome,
                "error": error,
                "reason": reason,
                "duration_ms": duration_ms,
                "worker": self.worker,
            }
        )
        if outcome == "done":
            body["result"] = _json_value(result, "result")
        return Decision.from_json(await self._request("POST", "/settle", body=body, key=key))

    async def reconcile(
        self,
        key: str,
        fencing_token: int,
        lookup: str,
        *,
        result: JSON = None,
        error: str | None = None,
        duration_ms: int | None = None,
    ) -> Decision:
        body = _drop_none(
            {
                "key": key,
                "fencing_token": fencing_token,
                "lookup": lookup,
                "error": error,
                "duration_ms": duration_ms,
                "worker": self.worker,
            }
        )
        if lookup == "found":
            body["result"] = _json_value(result, "result")
        return Decision.from_json(await self._request("POST", "/reconcile", body=body, key=key))

    async def get_key(
        self, key: str, *, after_token: int | None = None, wait: float | None = None
    ) -> KeyState:
        params = _drop_none({"after_token": after_token, "wait": _wait_param(wait)})
        timeout = self._timeout + (wait or 0)
        data = await self._request(
            "GET", f"/keys/{quote(key, safe='')}", params=params or None, key=key, timeout=timeout
        )
        return KeyState.from_json(data)

    async def list_keys(
        self,
        *,
        workflow_id: str | None = None,
        business_ref: str | None = None,
        tenant: str | None = None,
        tool: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        params = _list_params(workflow_id, business_ref, tenant, tool, limit)
        return list((await self._request("GET", "/keys", params=params))["keys"])

    async def wait_for_person(
        self, key: str, timeout: float, *, after_token: int | None = None
    ) -> KeyState:
        deadline = time.monotonic() + timeout
        state = await _aretrying(lambda: self.get_key(key), deadline)
        if after_token is None:
            after_token = state.fencing_token
        while state.fencing_token == after_token and state.awaiting_person:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait = min(left, MAX_WAIT_SECONDS)
            state = await _aretrying(
                lambda: self.get_key(key, after_token=after_token, wait=wait), deadline
            )
        return state

    def tool(
        self,
        name: str,
        execute: Callable[..., Any],
        *,
        find_by_key: Callable[..., Any],
        classify: Callable[[BaseException], ErrorClass | str] | None = None,
        in_flight_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> AsyncGuardedTool:
        """Wraps ``async def execute(key, args)`` and ``async def find_by_key(key)``."""
        from ._tool import AsyncGuardedTool

        return AsyncGuardedTool(
            self,
            name,
            execute,
            find_by_key=find_by_key,
            classify=classify,
            in_flight_retries=in_flight_retries,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
        )

    def guard(
        self,
        name: str,
        *,
        find_by_key: Callable[..., Any],
        classify: Callable[[BaseException], ErrorClass | str] | None = None,
        in_flight_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> Callable[[Callable[..., Any]], AsyncGuardedTool]:
        def wrap(execute: Callable[..., Any]) -> AsyncGuardedTool:
            return self.tool(
                name,
                execute,
                find_by_key=find_by_key,
                classify=classify,
                in_flight_retries=in_flight_retries,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
            )

        return wrap


def _list_params(
    workflow_id: str | None,
    business_ref: str | None,
    tenant: str | None,
    tool: str | None,
    limit: int | None,
) -> dict[str, Any]:
    if not workflow_id and not business_ref:
        raise ValueError("list_keys needs workflow_id or business_ref")
    return _drop_none(
        {
            "workflow_id": workflow_id,
            "business_ref": business_ref,
            "tenant": tenant,
            "tool": tool,
            "limit": limit,
        }
    )


#: How long a waiter pauses before asking again after idemwatch could not answer.
_OUTAGE_PAUSE = 0.5


def _retrying(ask: Callable[[], KeyState], deadline: float, sleep: Callable[[float], None]) -> KeyState:
    """``ask()``, asked again while idemwatch is unavailable (a restart, a network blip)
    until ``deadline``; then the last error. A person's decision outlives a restart."""
    while True:
        try:
            return ask()
        except Unavailable:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            sleep(min(_OUTAGE_PAUSE, left))


async def _aretrying(ask: Callable[[], Any], deadline: float) -> KeyState:
    """The asyncio twin of :func:`_retrying`."""
    while True:
        try:
            return await ask()
        except Unavailable:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            await asyncio.sleep(min(_OUTAGE_PAUSE, left))


def _wait_param(wait: float | None) -> int | None:
    if wait is None:
        return None
    return max(1, min(MAX_WAIT_SECONDS, int(wait + 0.999)))


if TYPE_CHECKING:  # the tools import the clients; only type checkers need this
    from ._tool import AsyncGuardedTool, GuardedTool

__all__ = ["AsyncClient", "Client", "IdemwatchError"]
