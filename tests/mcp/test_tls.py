"""https for `--upstream-url` and `--guard-url` (docs/MCP.md, "TLS"). A throwaway CA and a
server certificate for 127.0.0.1 made with `openssl`; the refund server speaks HTTPS under
uvicorn with that certificate, and a real `idemwatch serve` sits behind a small
TLS-terminating proxy (tls_proxy.py: serve itself speaks plain HTTP, as behind nginx).
The proxy trusts the CA only when told to (--upstream-ca-file, --guard-ca-file); without it
the start fails naming the certificate problem, and nothing reaches the upstream."""

import contextlib
import os
import shutil
import subprocess
import sys

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

from conftest import BIN, HERE
from processes import http_upstream, running, serve, worker_auth_file

pytestmark = pytest.mark.anyio

REFUND = {"order": "T-1", "amount_p": 700, "reason": "scratched"}
TOKEN = "iw_mcp_tls_worker_0123456789abcdef0000"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificates(directory, name="ca"):
    """A CA (`<name>.pem`) and a server certificate for 127.0.0.1 it signed:
    (ca, certificate, key)."""
    if shutil.which("openssl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("openssl is required under CI=true")
        pytest.skip("*** no openssl: the TLS tests are SKIPPED ***")
    d = directory / name
    d.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", f"/CN=idemwatch test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                                  "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    return d / "ca.pem", d / "server.pem", d / "server.key"


def https(url):
    return url.replace("http://", "https://", 1)


def proxy_args(env, *extra):
    return ["mcp-proxy", "--tools-file", str(env.tools), "--database-url", f"sqlite://{env.guard_db}?mode=rwc",
            "--lease-margin", "1s", *extra]


@contextlib.asynccontextmanager
async def host(args):
    params = StdioServerParameters(command=BIN, args=args,
                                   env={"IDEMWATCH_LOG": "warn", "PATH": os.environ.get("PATH", "")})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, client_info=Implementation(name="tls-host", version="1")) as s:
            await s.initialize()
            yield s


def start_fails(args, **env):
    started = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                             env={"PATH": os.environ.get("PATH", ""), **env})
    assert started.returncode != 0, started
    assert "panicked" not in started.stderr, started.stderr
    return started.stderr


async def test_an_https_upstream_is_reached_through_its_private_ca_and_refused_without_it(env):
    ca, cert, key = certificates(env.tmp)
    other_ca, _, _ = certificates(env.tmp, "other")
    with http_upstream(env, tls=(cert, key)) as base:
        url = f"{https(base)}/mcp"
        async with host(proxy_args(env, "--upstream-url", url, "--upstream-ca-file", str(ca))) as h:
            first = await h.call_tool("issue_refund", REFUND)
            retry = await h.call_tool("issue_refund", REFUND)
        # The system's trust store does not know the CA; nor does another CA's file.
        untrusted = start_fails(proxy_args(env, "--upstream-url", url))
        wrong = start_fails(proxy_args(env, "--upstream-url", url, "--upstream-ca-file", str(other_ca)))
    assert not first.is_error, first
    assert retry.meta["io.idemwatch/guard"]["replayed"] is True
    assert env.effects() == 1
    for stderr in (untrusted, wrong):
        assert "did not complete initialize" in stderr and "invalid peer certificate" in stderr, stderr
        assert "UnknownIssuer" in stderr, stderr


async def test_an_https_guard_behind_a_tls_proxy_is_reached_through_its_private_ca(env):
    ca, cert, key = certificates(env.tmp)
    auth = worker_auth_file(env.tmp / "auth.toml", {TOKEN: ("tls-proxies", ["worker"])})
    with http_upstream(env) as upstream, serve(env, auth) as guard, \
            running([sys.executable, str(HERE / "tls_proxy.py")],
                    {"BACKEND_PORT": guard.rsplit(":", 1)[1], "CERT": str(cert), "KEY": str(key)},
                    "the TLS proxy") as terminator:
        args = ["mcp-proxy", "--tools-file", str(env.tools), "--guard-url", https(terminator),
                "--guard-token", TOKEN, "--upstream-url", f"{upstream}/mcp"]
        async with host([*args, "--guard-ca-file", str(ca)]) as h:
            first = await h.call_tool("issue_refund", REFUND)
            retry = await h.call_tool("issue_refund", REFUND)
        untrusted = start_fails(args)
    assert not first.is_error, first
    assert retry.meta["io.idemwatch/guard"]["replayed"] is True
    assert env.effects() == 1
    assert "cannot reach it" in untrusted and "invalid peer certificate: UnknownIssuer" in untrusted, untrusted
    assert TOKEN not in untrusted


def test_a_plain_http_guard_on_another_host_needs_guard_allow_http(env):
    args = ["mcp-proxy", "--tools-file", str(env.tools), "--guard-url", "http://idemwatch.invalid:8080",
            "--guard-token", TOKEN, "--upstream-url", "http://127.0.0.1:9/mcp"]
    refused = start_fails(args)
    assert "plain http:// to another host" in refused and "--guard-allow-http" in refused, refused
    # Allowed, it warns and goes on (here to a host that does not resolve).
    allowed = start_fails([*args, "--guard-allow-http"], IDEMWATCH_LOG="warn")
    assert "token crosses the network in clear" in allowed, allowed
    assert "cannot reach it" in allowed, allowed
    assert TOKEN not in refused + allowed
