"""Processes the --upstream-url and --guard-url suites start beside the proxy: the refund
server over Streamable HTTP (refund_server_http.py) and a real `idemwatch serve`."""

import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import BIN, HERE


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(process, port, what, seconds=60):
    """Waits until `process` accepts connections on 127.0.0.1:`port`; fails if it exits first."""
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"{what} did not listen on port {port} (exit code {process.poll()})")


@contextlib.contextmanager
def running(argv, env, what):
    """Starts `argv` listening on the port in env["PORT"]; yields its base URL."""
    port = free_port()
    process = subprocess.Popen([a.replace("{port}", str(port)) for a in argv], cwd=HERE,
                               env={"PATH": os.environ.get("PATH", ""), **env, "REFUND_PORT": str(port)})
    try:
        wait_for_port(process, port, what)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def http_upstream(env, token=None, tls=None):
    """The refund server over Streamable HTTP; yields its base URL (the endpoint is /mcp).
    `tls`: (certificate, key) PEM files to serve HTTPS with (the URL is still http://…)."""
    extra = {"REFUND_TOKEN": token} if token else {}
    if tls:
        extra |= {"REFUND_CERT": str(tls[0]), "REFUND_KEY": str(tls[1])}
    return running([sys.executable, str(HERE / "refund_server_http.py")],
                   {"REFUND_DB": str(env.refunds), "REFUND_CONTROL": str(env.control_file), **extra},
                   "the HTTP refund server")


def worker_auth_file(path, tokens):
    """An auth file of bearer tokens: {token: (name, [roles])}."""
    path.write_text('mode = "builtin"\n' + "".join(
        f'[[tokens]]\nname = "{name}"\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\nroles = {roles!r}\n'
        .replace("'", '"') for token, (name, roles) in tokens.items()))
    return path


def serve(env, auth_file, *extra):
    """A real `idemwatch serve` on the suite's guard database and tools file."""
    return running([BIN, "serve", "--database-url", f"sqlite://{env.guard_db}?mode=rwc", "--listen", "127.0.0.1:{port}",
                    "--auth-file", str(auth_file), "--tools-file", str(env.tools), *extra],
                   {"IDEMWATCH_LOG": "warn"}, "idemwatch serve")
