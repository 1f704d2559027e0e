"""The proxy's own /metrics (`mcp-proxy --listen`): each annotation disagreement found at
start is one series of `idemwatch_mcp_annotation_disagreements`, scraped over HTTP on the
listener that serves /mcp, without credentials and under any Host name (as serve's), or on
--metrics-listen beside a stdio session."""

import sys
import urllib.error
import urllib.request

import pytest

from conftest import BIN, HERE
from processes import free_port, running, worker_auth_file


def scrape(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, None, ""


def series(text, name):
    """{labels: value} of one family in the Prometheus text format."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name):].rsplit(" ", 1)
            found[labels] = float(value)
    return found


def proxy(env, *extra):
    return running([BIN, "mcp-proxy", "--tools-file", str(env.tools), "--database-url",
                    f"sqlite://{env.guard_db}?mode=rwc", "--listen", "127.0.0.1:{port}", *extra,
                    "--", sys.executable, str(HERE / "refund_server.py")],
                   {"REFUND_DB": str(env.refunds), "IDEMWATCH_LOG": "warn"}, "the proxy")


def test_every_annotation_disagreement_is_a_series_at_one(env):
    # tools.example.toml calls cancel_order read-only; the server marks it
    # readOnlyHint: false and destructiveHint: true. issue_refund and the read-only
    # tools agree with the file.
    with proxy(env) as base:
        status, content_type, text = scrape(f"{base}/metrics")
        foreign = scrape(f"{base}/metrics", {"Host": "prometheus.internal"})[0]
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4"), (status, content_type)
    assert series(text, "idemwatch_mcp_annotation_disagreements") == {
        '{annotation="destructiveHint",tool="cancel_order"}': 1.0,
        '{annotation="readOnlyHint",tool="cancel_order"}': 1.0,
    }, text
    assert "# TYPE idemwatch_mcp_annotation_disagreements gauge" in text
    assert foreign == 200


def test_a_file_that_agrees_exports_no_disagreement_and_metrics_need_no_token(env):
    env.tools.write_text(env.tools.read_text().replace('[tools.cancel_order]\nkind = "read_only"',
                                                       '[tools.cancel_order]\nkind = "non_idempotent"\n'
                                                       'key_retention = "24h"\ncall_timeout = "5s"'))
    auth = worker_auth_file(env.tmp / "auth.toml", {"iw_metrics_test_worker_0123456789ab": ("host", ["worker"])})
    with proxy(env, "--auth-file", str(auth)) as base:
        status, _, text = scrape(f"{base}/metrics")
        mcp_status = scrape(f"{base}/mcp")[0]
    assert status == 200
    assert "idemwatch_build_info{" in text
    assert series(text, "idemwatch_mcp_annotation_disagreements") == {}, text
    # /mcp still needs the bearer token.
    assert mcp_status == 401


@pytest.mark.anyio
async def test_over_stdio_metrics_listen_serves_them_while_the_host_is_connected(env):
    port = free_port()
    async with env.host("test-host", "--metrics-listen", f"127.0.0.1:{port}") as h:
        await h.list_tools()
        status, _, text = scrape(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert set(series(text, "idemwatch_mcp_annotation_disagreements")) == {
        '{annotation="destructiveHint",tool="cancel_order"}', '{annotation="readOnlyHint",tool="cancel_order"}'}


@pytest.mark.anyio
async def test_a_run_of_identical_refusals_is_one_row_and_counted_on_the_proxys_metrics(env):
    # The in-process guard answers a repeat of the newest refusal without a row (docs/GUARD.md)
    # and tells the proxy's metrics, as serve's guard tells serve's. The model re-issues the
    # same refund with another amount three times: new JSON-RPC request ids (the attempt
    # context), the same refusal.
    port = free_port()
    refund = {"order": "M-1", "amount_p": 1000, "reason": "late"}
    async with env.host("loop-host", "--metrics-listen", f"127.0.0.1:{port}") as h:
        _, _, before = scrape(f"http://127.0.0.1:{port}/metrics")
        first = await h.call_tool("issue_refund", refund)
        refused = [await h.call_tool("issue_refund", {**refund, "amount_p": 1100}) for _ in range(3)]
        _, _, after = scrape(f"http://127.0.0.1:{port}/metrics")
    name = "idemwatch_guard_refusals_not_logged_total"
    label = '{reason="payload_mismatch",tool="issue_refund"}'
    assert series(before, name)[label] == 0, before
    assert not first.is_error, first
    assert all(r.is_error and "differing: amount_p" in r.content[0].text for r in refused), refused
    assert series(after, name)[label] == 2, after
    kinds = [k for k, _, _ in env.attempts()]
    assert kinds.count("payload_mismatch") == 1, kinds
