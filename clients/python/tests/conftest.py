"""Fixtures: a real ``idemwatch serve`` per backend, a fake provider, intents.

The server binary comes from ``IDEMWATCH_BIN`` (default ``target/debug/idemwatch`` at the
repository root). Every server test runs on SQLite and on PostgreSQL; PostgreSQL needs
``IDEMWATCH_TEST_PG_URL`` or ``TEST_DATABASE_URL``. Without one it is skipped loudly, and
under ``CI=true`` it fails.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import idemwatch  # noqa: E402
from fake_provider import FakeProvider  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TOOLS_FILE = REPO / "clients" / "testdata" / "tools.toml"
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PG_SKIP = "*** SKIPPED (PostgreSQL unavailable: set IDEMWATCH_TEST_PG_URL or TEST_DATABASE_URL) ***"


def server_binary() -> Path:
    return Path(os.environ.get("IDEMWATCH_BIN") or REPO / "target" / "debug" / "idemwatch")


def pg_url() -> str | None:
    return os.environ.get("IDEMWATCH_TEST_PG_URL") or os.environ.get("TEST_DATABASE_URL") or None


_next_port = itertools.count()


def free_port() -> int:
    """A loopback port below the kernel's ephemeral range, checked free by binding it.

    A port from the ephemeral range (bind to 0, close) can be given to any outgoing
    connection before the server binds it ("Address already in use"); below the range
    only another listener can take it. Same rule as tests/it/support/pg.rs.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    lowest = 10000
    span = max(ephemeral - lowest, 1000)
    start = (os.getpid() * 7919) % span
    for _ in range(span):
        port = lowest + (start + next(_next_port)) % span
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {lowest}..{lowest + span}")


@dataclass
class Server:
    url: str
    backend: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _serve_flags(binary: Path) -> str:
    try:
        return subprocess.run(
            [str(binary), "serve", "--help"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def start_server(
    backend: str, tmp: Path, port: int | None = None, extra: list[str] | None = None
) -> Server:
    binary = server_binary()
    if not binary.exists():
        message = f"idemwatch binary not found at {binary} (build it or set IDEMWATCH_BIN)"
        if CI:
            pytest.fail(message)
        pytest.skip(f"*** SKIPPED ({message}) ***")
    if backend == "sqlite":
        database = f"sqlite://{tmp / 'guard.db'}"
    else:
        database = pg_url()
        if database is None:
            if CI:
                pytest.fail("CI=true but no PostgreSQL: " + PG_SKIP)
            print("\n" + PG_SKIP, file=sys.stderr)
            pytest.skip(PG_SKIP)
    port = port or free_port()
    args = [
        str(binary),
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--database-url",
        database,
        "--tools-file",
        str(TOOLS_FILE),
    ]
    help_text = _serve_flags(binary)
    # A short lease margin keeps the killed-worker case to seconds, where the server has one.
    if "--lease-margin" in help_text:
        args += ["--lease-margin", "2s"]
    args += extra or []
    log = tmp / f"serve-{backend}.log"
    process = subprocess.Popen(
        args,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
    )
    server = Server(f"http://127.0.0.1:{port}", backend, process, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"idemwatch serve ({backend}) exited {process.returncode}:\n{server.tail()}")
        try:
            if httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    pytest.fail(f"idemwatch serve ({backend}) did not become ready:\n{server.tail()}")


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(request.param, tmp_path_factory.mktemp(f"idemwatch-{request.param}"))
    yield srv
    srv.process.terminate()
    try:
        srv.process.wait(10)
    except subprocess.TimeoutExpired:
        srv.process.kill()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    p = FakeProvider()
    yield p
    p.close()


@pytest.fixture
def client(server: Server) -> Iterator[idemwatch.Client]:
    with idemwatch.Client(server.url, worker="pytest") as c:
        yield c


# The run id scopes this test session's intents on a shared PostgreSQL database: test
# scaffolding only (a real orchestrator takes it from its recorded run state).
_RUN = uuid.uuid4().hex[:12]
_seq = itertools.count(1)


@pytest.fixture
def intent(request: pytest.FixtureRequest) -> idemwatch.Intent:
    n = next(_seq)
    return idemwatch.Intent(
        tenant="acme",
        workflow_id=f"py-{_RUN}-{request.node.name}",
        step_id=str(n),
        intent_id=f"refund:order-A-{n}",
    )
