"""Upstreams that are wrong in one way each, for the proxy's start-up checks
(test_startup.py). The first argument picks the fault:

  old-protocol   answers initialize with a protocol version no MCP SDK knows
  no-tools       a real MCP server (the official Python SDK) that lists no tools
"""

import json
import sys

from mcp.server.mcpserver import MCPServer


def old_protocol():
    # A raw JSON-RPC peer over stdio: no SDK would send this version.
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("method") == "initialize":
            answer = {"protocolVersion": "2023-01-01", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "old", "version": "0.1"}}
            print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": answer}), flush=True)
        elif "id" in message:
            tools = {"tools": [{"name": "issue_refund", "inputSchema": {"type": "object"}}]}
            print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": tools}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "old-protocol":
        old_protocol()
    elif sys.argv[1] == "no-tools":
        MCPServer("empty").run()
