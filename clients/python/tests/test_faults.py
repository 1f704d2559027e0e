"""The fault cases of docs/GUARD.md against a real ``idemwatch serve``: each ends with exactly
one refund at the provider (or none where the provider refused)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import pytest

import idemwatch
from conftest import CI, REPO, Server
from fake_provider import FakeProvider
from refunds import async_refund_tool, refund_tool

ARGS = {"order": "A-88214", "amount_p": 4500, "reason": "arrived late"}
HERE = Path(__file__).resolve().parent


def test_a_timeout_after_the_provider_acted_is_reconciled_not_resent(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url)
    provider.fail_next("delay", seconds=2.5)  # the call timeout is 1 s
    with pytest.raises(idemwatch.OutcomeUnknown) as err:
        refund.run(intent, ARGS, business_ref="order:A-88214")
    assert err.value.retryable and "timeout" in err.value.reason
    assert len(provider.effects) == 1

    outcome = refund.run(intent, ARGS, business_ref="order:A-88214")
    assert outcome.replayed is True
    assert outcome.result == provider.effects[0]
    assert provider.calls == 1, "reconciled by lookup, never resent"
    assert len(provider.effects) == 1


def test_a_lost_response_is_reconciled(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url)
    provider.fail_next("lose_response")
    with pytest.raises(idemwatch.OutcomeUnknown):
        refund.run(intent, ARGS)
    outcome = refund.run(intent, ARGS)
    assert outcome.replayed and outcome.result["refund_id"] == "rf_1"
    assert provider.calls == 1 and len(provider.effects) == 1


def test_a_worker_killed_after_the_effect_is_reconciled_on_redelivery(
    server: Server, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    env = {
        **os.environ,
        "IDEMWATCH_URL": server.url,
        "PROVIDER_URL": provider.url,
        "INTENT": json.dumps(asdict(intent)),
        "ARGS": json.dumps(ARGS),
    }
    worker = subprocess.Popen(
        [sys.executable, str(HERE / "worker.py")],
        env={**env, "MODE": "crash"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "EFFECT"
    worker.send_signal(signal.SIGKILL)  # after the effect, before settling
    worker.wait(10)
    assert len(provider.effects) == 1

    # Redelivered: 409 in flight while the dead worker's lease lives (retried, honouring
    # retry_after), then a takeover that finds the refund at the provider.
    redelivered = subprocess.run(
        [sys.executable, str(HERE / "worker.py")],
        env={**env, "MODE": "run", "RETRIES": "60"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert redelivered.returncode == 0, redelivered.stdout + redelivered.stderr
    answer = json.loads(redelivered.stdout.strip().splitlines()[-1])
    assert answer["replayed"] is True
    assert answer["result"] == provider.effects[0]
    assert provider.calls == 1 and len(provider.effects) == 1


def test_sixteen_concurrent_workers_on_one_intent_make_one_refund(
    server: Server, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    # Well inside the 1 s call timeout, which the sync client now enforces as a deadline
    # on the whole call (the 15 others wait on the key meanwhile).
    provider.latency = 0.3
    clients = [idemwatch.Client(server.url, worker=f"worker-{i}") for i in range(16)]
    tools = [refund_tool(c, provider.url, in_flight_retries=20, backoff_base=0.1) for c in clients]
    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(lambda t: t.run(intent, ARGS), tools))
    for c in clients:
        c.close()
    assert len(provider.effects) == 1
    assert {o.result["refund_id"] for o in outcomes} == {"rf_1"}
    assert sum(not o.replayed for o in outcomes) == 1


async def test_sixteen_concurrent_async_workers_on_one_intent_make_one_refund(
    server: Server, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    provider.latency = 0.5
    async with idemwatch.AsyncClient(server.url, worker="async-worker") as client:
        refund = async_refund_tool(client, provider.url, in_flight_retries=20, backoff_base=0.1)
        outcomes = await asyncio.gather(*(refund.run(intent, ARGS) for _ in range(16)))
    assert len(provider.effects) == 1
    assert sum(not o.replayed for o in outcomes) == 1
    assert all(o.result == provider.effects[0] for o in outcomes)


def test_a_second_delivery_waits_on_the_key_instead_of_sleeping_out_retry_after(
    server: Server, provider: FakeProvider, intent: idemwatch.Intent, monkeypatch: pytest.MonkeyPatch
) -> None:
    import idemwatch._tool as tool_module

    import types

    slept: list[float] = []
    clock = types.SimpleNamespace(
        monotonic=time.monotonic, sleep=lambda s: (slept.append(s), time.sleep(s))
    )
    monkeypatch.setattr(tool_module, "time", clock)  # the guarded tool's clock only
    provider.latency = 0.3
    clients = [idemwatch.Client(server.url, worker=f"worker-{i}") for i in range(4)]
    tools = [refund_tool(c, provider.url, in_flight_retries=5) for c in clients]
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda t: t.run(intent, ARGS), tools))
    for c in clients:
        c.close()
    assert len(provider.effects) == 1 and sum(not o.replayed for o in outcomes) == 1
    assert slept == [], "the in-flight deliveries long-polled the key; none slept out Retry-After"


def test_the_sync_client_enforces_the_call_timeout(
    client: idemwatch.Client, intent: idemwatch.Intent
) -> None:
    import threading

    finished = threading.Event()

    def execute(key: str, args: dict) -> dict:
        time.sleep(3)  # ignores the 1 s call timeout (a provider SDK without one)
        finished.set()
        return {"refund_id": "rf_late"}

    refund = client.tool("issue_refund", execute, find_by_key=lambda key: None)
    with pytest.raises(idemwatch.OutcomeUnknown) as err:
        refund.run(intent, ARGS)
    assert err.value.reason == "timeout after 1 s"
    assert not finished.is_set(), "the worker stopped waiting at the deadline"
    state = client.get_key(err.value.key)
    assert state.status == "UNKNOWN", "settled unknown, not left in flight"


async def test_the_async_client_enforces_the_call_timeout(
    server: Server, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    async with idemwatch.AsyncClient(server.url) as client:
        refund = async_refund_tool(client, provider.url)
        provider.fail_next("delay", seconds=3)
        with pytest.raises(idemwatch.OutcomeUnknown) as err:
            await refund.run(intent, ARGS)
        assert err.value.reason == "timeout after 1 s"
        outcome = await refund.run(intent, ARGS)
    assert outcome.replayed and len(provider.effects) == 1 and provider.calls == 1


def test_a_redelivery_after_success_replays(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url)
    first = refund.run(intent, ARGS)
    again = refund.run(intent, ARGS)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.result == first.result
    assert provider.calls == 1


def test_rephrased_free_text_replays_and_is_never_sent(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url)
    first = refund.run(intent, ARGS)
    again = refund.run(intent, {**ARGS, "reason": "the parcel came two weeks late"})
    assert again.replayed and again.result == first.result
    assert provider.calls == 1
    assert all("reason" not in call["args"] for call in provider.received)


def test_a_changed_amount_is_refused_with_the_differing_field(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url)
    refund.run(intent, ARGS)
    with pytest.raises(idemwatch.PayloadMismatch) as err:
        refund.run(intent, {**ARGS, "amount_p": 9000})
    assert err.value.status == 422 and err.value.differing_fields == ["amount_p"]
    assert not err.value.retryable
    assert provider.calls == 1 and len(provider.effects) == 1
    assert idemwatch.for_model(err.value)["status"] == "payload_mismatch"


def test_a_definitive_decline_is_not_retried_and_replays_as_the_same_failure(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url)
    provider.fail_next("decline", error="card declined")
    with pytest.raises(idemwatch.OperationFailed) as first:
        refund.run(intent, ARGS)
    with pytest.raises(idemwatch.OperationFailed) as resumed:
        refund.run(intent, ARGS)
    assert first.value.error == resumed.value.error == "card declined"
    assert not resumed.value.retryable
    assert provider.calls == 1 and provider.effects == []


def _escalated(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> tuple[idemwatch.GuardedTool, pytest.ExceptionInfo[idemwatch.NeedsHumanReview]]:
    """A key a person must decide: the response was lost, then the provider forgot the key."""
    refund = refund_tool(client, provider.url, name="forgetful_refund")  # retention 2 s
    provider.fail_next("lose_response")
    with pytest.raises(idemwatch.OutcomeUnknown):
        refund.run(intent, ARGS)
    time.sleep(2.5)
    provider.forget()
    with pytest.raises(idemwatch.NeedsHumanReview) as err:
        refund.run(intent, ARGS)
    return refund, err


def test_a_retry_after_the_provider_forgot_the_key_needs_a_person_and_never_resends(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund, err = _escalated(client, provider, intent)
    assert provider.calls == 1, "no resend after the provider's retention"
    assert len(provider.effects) == 1
    assert err.value.key and not err.value.retryable
    state = refund.wait_for_person(err.value, timeout=1.5)
    assert state.awaiting_person and state.status == "UNKNOWN"
    assert idemwatch.for_model(err.value)["status"] == "needs_human_review"


def test_wait_for_person_survives_a_serve_restart_and_a_refused_resolve(
    provider: FakeProvider, intent: idemwatch.Intent, tmp_path: Path
) -> None:
    import threading

    import httpx

    from conftest import start_server

    server = start_server("sqlite", tmp_path)
    port = int(server.url.rsplit(":", 1)[1])
    client = idemwatch.Client(server.url, worker="waiter")
    refund, err = _escalated(client, provider, intent)
    key = err.value.key
    resolve = f"/api/v1/keys/{key}/resolve"

    def person(url: str, body: dict) -> httpx.Response:
        """A person resolving on the page: the local admin, with its CSRF token."""
        with httpx.Client(base_url=url, timeout=10) as web:
            token = web.get("/api/v1/csrf").json()["csrf_token"]
            return web.post(resolve, json=body, headers={"X-CSRF-Token": token})

    waited: dict[str, object] = {}
    waiter = threading.Thread(target=lambda: waited.update(state=refund.wait_for_person(err.value, 60)))
    waiter.start()
    # A release past the provider's retention is refused (422): the wait goes on.
    refused = person(server.url, {"resolution": "release", "reason": "try"})
    assert refused.status_code == 422, refused.text
    # serve dies under the waiter (SIGKILL: a graceful stop would wait for the long poll)
    # and starts again; a person decides on the new process.
    server.process.kill()
    server.process.wait(10)
    time.sleep(1)
    assert waiter.is_alive(), "the wait outlived the refused resolve and the restart"
    server = start_server("sqlite", tmp_path, port=port)
    try:
        done = person(
            server.url,
            {"resolution": "done", "reason": "found it at the provider", "evidence": "rf_1", "result": {"refund_id": "rf_1"}},
        )
        assert done.status_code == 200, done.text
        waiter.join(30)
        state = waited["state"]
        assert isinstance(state, idemwatch.KeyState)
        assert state.status == "DONE" and not state.awaiting_person
        assert refund.run(intent, ARGS).replayed
        assert provider.calls == 1
    finally:
        client.close()
        server.process.kill()
        server.process.wait(10)


def test_the_wrapper_refuses_to_run_without_an_intent(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url)
    with pytest.raises(idemwatch.IntentRequired):
        refund.run(None, ARGS)  # type: ignore[arg-type]
    with pytest.raises(idemwatch.IntentRequired) as err:
        refund.run(idemwatch.Intent("acme", "run-1", "", "refund:x"), ARGS)
    assert err.value.field == "intent.step_id"
    assert provider.calls == 0


def test_an_unknown_tool_is_refused_by_the_server(
    client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    refund = refund_tool(client, provider.url, name="not_in_the_tools_file")
    with pytest.raises(idemwatch.UnknownTool) as err:
        refund.run(intent, ARGS)
    assert err.value.status == 400 and err.value.field == "intent.tool"
    assert provider.calls == 0


def test_a_key_started_by_python_is_finished_by_typescript(
    server: Server, client: idemwatch.Client, provider: FakeProvider, intent: idemwatch.Intent
) -> None:
    node = shutil.which("node")
    if node is None:
        if CI:
            pytest.fail("CI=true but node is not installed")
        pytest.skip("*** SKIPPED (node not installed) ***")
    refund = refund_tool(client, provider.url)
    provider.fail_next("lose_response")
    with pytest.raises(idemwatch.OutcomeUnknown):
        refund.run(intent, ARGS)  # left UNKNOWN

    script = REPO / "clients" / "typescript" / "test" / "support" / "finish.js"
    finished = subprocess.run(
        [node, str(script)],
        env={
            **os.environ,
            "IDEMWATCH_URL": server.url,
            "PROVIDER_URL": provider.url,
            "TOOL": "issue_refund",
            "INTENT": json.dumps(asdict(intent)),
            "ARGS": json.dumps(ARGS),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    answer = json.loads(finished.stdout.strip().splitlines()[-1])
    assert answer["replayed"] is True and answer["result"] == provider.effects[0]
    assert provider.calls == 1 and len(provider.effects) == 1
    # And Python sees TypeScript's settlement.
    assert refund.run(intent, ARGS).result == provider.effects[0]
