"""A caller past its bounds is answered 429 with ``Retry-After``; both Python clients wait
that long and send the same request again (bounded: ``max_retries``, ``max_retry_wait``).
Against a real ``serve`` with ``--guard-rate-per-token 1``: one request a second, so a
guarded call (admit, then settle at once) meets a real 429."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest

import idemwatch
from conftest import Server, start_server
from fake_provider import FakeProvider
from refunds import async_refund_tool, refund_tool

ARGS = {"order": "A-1", "amount_p": 4500, "reason": "arrived late"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def slow_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp: Path = tmp_path_factory.mktemp(f"idemwatch-rate-{request.param}")
    srv = start_server(request.param, tmp, extra=["--guard-rate-per-token", "1"])
    yield srv
    srv.process.terminate()
    srv.process.wait(10)


class Wire:
    """What went over the wire: (sent at, method, path) per request and (status,
    Retry-After, received at) per answer, from httpx's event hooks."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str, str]] = []
        self.answers: list[tuple[int, str | None, float]] = []

    def request(self, r: httpx.Request) -> None:
        self.sent.append((time.monotonic(), r.method, r.url.path))

    def response(self, r: httpx.Response) -> None:
        self.answers.append((r.status_code, r.headers.get("Retry-After"), time.monotonic()))

    def hooks(self) -> dict:
        return {"request": [self.request], "response": [self.response]}

    async def arequest(self, r: httpx.Request) -> None:
        self.request(r)

    async def aresponse(self, r: httpx.Response) -> None:
        self.response(r)

    def ahooks(self) -> dict:
        return {"request": [self.arequest], "response": [self.aresponse]}

    def assert_waited_as_asked(self) -> None:
        """At least one 429 came with Retry-After, and each request after one was sent no
        sooner than it asked; the last answer is a success."""
        refused = [i for i, a in enumerate(self.answers) if a[0] == 429]
        assert refused, f"no 429 met: {self.answers}"
        for i in refused:
            status, retry_after, at = self.answers[i]
            assert retry_after is not None and int(retry_after) >= 1
            resent_at = self.sent[i + 1][0]
            assert resent_at - at >= int(retry_after), (self.answers, self.sent)
            assert self.sent[i + 1][1:] == self.sent[i][1:], "the same request again"
        assert self.answers[-1][0] == 200, self.answers


def _intent() -> idemwatch.Intent:
    run = uuid.uuid4().hex[:12]
    return idemwatch.Intent(
        tenant="acme", workflow_id=f"rate-{run}", step_id="1", intent_id=f"refund:order-{run}"
    )


def test_a_guarded_call_past_the_rate_waits_as_asked_and_succeeds(
    slow_server: Server, provider: FakeProvider
) -> None:
    wire = Wire()
    http = httpx.Client(timeout=30, event_hooks=wire.hooks())
    with idemwatch.Client(slow_server.url, worker="rate", http_client=http) as client:
        refund = refund_tool(client, provider.url)
        outcome = refund.run(_intent(), ARGS)
        assert outcome.replayed is False
        assert provider.calls == 1
        # admit, a 429 on the settle, then the same settle again.
        wire.assert_waited_as_asked()
        assert [s[2] for s in wire.sent][-2:] == ["/api/v1/guard/settle"] * 2
        # The key is DONE: the retried settle was recorded once.
        time.sleep(1.1)
        assert client.get_key(outcome.key).status == "DONE"


def test_the_backoff_is_bounded_by_retries_and_by_the_wait_allowed(
    slow_server: Server,
) -> None:
    for bounds in ({"max_retries": 0}, {"max_retry_wait": 0.5}):
        wire = Wire()
        http = httpx.Client(timeout=30, event_hooks=wire.hooks())
        time.sleep(1.1)  # a full bucket: the first request passes, the second is refused
        with idemwatch.Client(slow_server.url, http_client=http, **bounds) as client:
            client.list_keys(workflow_id="nobody")
            with pytest.raises(idemwatch.Unavailable) as refused:
                client.list_keys(workflow_id="nobody")
        assert refused.value.status == 429 and refused.value.retry_after >= 1, bounds
        assert len(wire.sent) == 2, f"{bounds}: not sent again: {wire.sent}"


async def test_the_async_client_waits_as_asked_too(
    slow_server: Server, provider: FakeProvider
) -> None:
    wire = Wire()
    http = httpx.AsyncClient(timeout=30, event_hooks=wire.ahooks())
    await asyncio.sleep(1.1)
    async with idemwatch.AsyncClient(slow_server.url, worker="rate", http_client=http) as client:
        refund = async_refund_tool(client, provider.url)
        outcome = await refund.run(_intent(), ARGS)
        assert outcome.replayed is False and provider.calls == 1
        wire.assert_waited_as_asked()
    await http.aclose()
