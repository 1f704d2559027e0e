"""A fake payments provider, served over HTTP on localhost from a thread of the test process.

It honours idempotency keys the way Stripe does (a second POST with a known key returns the
first refund and does nothing), counts real refunds (``effects``), and can be told to fail:

- ``delay``: act, then answer ``seconds`` later (past the client's deadline);
- ``lose_response``: act, then close the connection without answering;
- ``hang``: act, then hold the connection until the test releases it;
- ``decline``: refuse definitively (402) and do nothing;
- ``forget()``: forget every key (its retention ran out); the refunds stay.

The HTTP surface is the same as the TypeScript suite's fake, so a worker in either
language (or a subprocess) can use either:

    POST /v1/refunds        Idempotency-Key header, JSON args -> 201 refund | 402 {"error"}
    GET  /v1/refunds?idempotency_key=K                         -> 200 refund | 404
    GET  /_effects                                             -> {"effects": [...], "calls": n}
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class FakeProvider:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: deque[dict[str, Any]] = deque()
        self._release = threading.Event()
        self.effects: list[dict[str, Any]] = []
        self.by_key: dict[str, dict[str, Any]] = {}
        self.received: list[dict[str, Any]] = []
        self.calls = 0
        self.latency = 0.0
        ThreadingHTTPServer.request_queue_size = 64
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    # --- what tests tell it -------------------------------------------------------------
    def fail_next(self, mode: str, **params: Any) -> None:
        """Queues a fault for the next refund call."""
        with self._lock:
            self._faults.append({"mode": mode, **params})

    def forget(self) -> None:
        with self._lock:
            self.by_key.clear()

    def release(self) -> None:
        self._release.set()

    def effects_for(self, key: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.effects if e["key"] == key]

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    # --- the provider -------------------------------------------------------------------
    def refund(self, key: str, args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        with self._lock:
            self.calls += 1
            self.received.append({"key": key, "args": args})
            fault = self._faults.popleft() if self._faults else {}
            if fault.get("mode") == "decline":
                return fault, {"error": fault.get("error", "card declined")}
            record = self.by_key.get(key)
            if record is None:
                record = {
                    "refund_id": f"rf_{len(self.effects) + 1}",
                    "key": key,
                    "order": args.get("order"),
                    "amount_p": args.get("amount_p"),
                }
                self.effects.append(record)
                self.by_key[key] = record
            return fault, record

    def find(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self.by_key.get(key)

    def wait_released(self, timeout: float) -> None:
        self._release.wait(timeout)


def _handler(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/v1/refunds":
                key = parse_qs(url.query).get("idempotency_key", [""])[0]
                found = provider.find(key)
                self._send(200 if found else 404, found or {"error": "no such refund"})
            elif url.path == "/_effects":
                with provider._lock:
                    self._send(200, {"effects": provider.effects, "calls": provider.calls})
            else:
                self._send(404, {"error": "no route"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/refunds":
                self._send(404, {"error": "no route"})
                return
            key = self.headers.get("Idempotency-Key") or ""
            if not key:
                self._send(400, {"error": "Idempotency-Key is required"})
                return
            if provider.latency:
                time.sleep(provider.latency)
            fault, record = provider.refund(key, body)
            mode = fault.get("mode")
            if mode == "decline":
                self._send(402, record)
                return
            if mode == "delay":
                time.sleep(float(fault.get("seconds", 2)))
            if mode == "hang":
                provider.wait_released(float(fault.get("seconds", 60)))
                mode = "lose_response"
            if mode == "lose_response":
                self.close_connection = True
                return
            self._send(201, record)

    return Handler
