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
