"""refund_server.py's refund provider served over Streamable HTTP (the official Python
SDK's own transport, uvicorn), for `mcp-proxy --upstream-url`. The same tools and the
same durable effect table (REFUND_DB).

  REFUND_PORT     the port on 127.0.0.1 (required)
  REFUND_TOKEN    if set, every request needs `Authorization: Bearer <REFUND_TOKEN>`
                  (401 otherwise), as a remote MCP server behind a token does
  REFUND_CERT, REFUND_KEY
                  if set, HTTPS with this certificate and key (PEM files)
"""

import os

import uvicorn
from starlette.responses import PlainTextResponse

from refund_server import server

TOKEN = os.environ.get("REFUND_TOKEN")


def with_token(app):
    async def guarded(scope, receive, send):
        if scope["type"] == "http" and TOKEN:
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await PlainTextResponse("a bearer token is required", status_code=401)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    app = server.streamable_http_app(host="127.0.0.1")
    tls = {"ssl_certfile": os.environ["REFUND_CERT"], "ssl_keyfile": os.environ["REFUND_KEY"]} \
        if os.environ.get("REFUND_CERT") else {}
    uvicorn.run(with_token(app), host="127.0.0.1", port=int(os.environ["REFUND_PORT"]), log_level="warning", **tls)
