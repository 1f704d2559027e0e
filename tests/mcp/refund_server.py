"""A refund provider as an MCP server, written with the official Python SDK (`mcp`;
its FastMCP is `MCPServer` since mcp 2). It records every effect durably in SQLite
(REFUND_DB), so a test counts effects at the provider whatever happened to the
processes in between.

Faults are read from a JSON control file (REFUND_CONTROL) at each call:
  {"delay_s": 2.5}        issue_refund answers this late (the effect is written first)
  {"forget_after_s": 1}   the provider forgets keys this old: it no longer dedupes
                          them and find_refund no longer finds them
"""

import json
import os
import sqlite3
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

DB = os.environ["REFUND_DB"]
CONTROL = os.environ.get("REFUND_CONTROL", "")

server = MCPServer("refunds")


def control():
    try:
        with open(CONTROL) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def db():
    conn = sqlite3.connect(DB, timeout=10, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS refunds (id INTEGER PRIMARY KEY, order_id TEXT, amount_p INTEGER,"
        " idempotency_key TEXT, created REAL)"
    )
    return conn


def as_dict(row):
    return {"refund_id": f"rf_{row[0]}", "order": row[1], "amount_p": row[2]}


def remembered(conn, key):
    forget = control().get("forget_after_s")
    row = conn.execute(
        "SELECT id, order_id, amount_p, created FROM refunds WHERE idempotency_key = ? ORDER BY id LIMIT 1",
        (key,),
    ).fetchone()
    if row is None or (forget is not None and time.time() - row[3] > forget):
        return None
    return row


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False))
def issue_refund(order: str, amount_p: int, reason: str = "", idempotency_key: str = "") -> dict:
    """Refund amount_p pence on an order. Not idempotent without idempotency_key."""
    conn = db()
    if idempotency_key:
        row = remembered(conn, idempotency_key)
        if row is not None:
            return as_dict(row)
    cur = conn.execute(
        "INSERT INTO refunds (order_id, amount_p, idempotency_key, created) VALUES (?, ?, ?, ?)",
        (order, amount_p, idempotency_key or None, time.time()),
    )
    refund = {"refund_id": f"rf_{cur.lastrowid}", "order": order, "amount_p": amount_p}
    delay = control().get("delay_s", 0)
    if delay:
        time.sleep(delay)
    return refund


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def find_refund(idempotency_key: str) -> dict:
    """The refund made with this idempotency key, or null."""
    row = remembered(db(), idempotency_key)
    return {"refund": as_dict(row) if row else None}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def get_order(order: str) -> dict:
    """An order and how much was refunded on it."""
    total = db().execute("SELECT COALESCE(SUM(amount_p), 0), COUNT(*) FROM refunds WHERE order_id = ?", (order,)).fetchone()
    return {"order": order, "refunded_p": total[0], "refunds": total[1]}


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def cancel_order(order: str) -> str:
    """Cancels an order (the tools file wrongly calls it read-only)."""
    return f"cancelled {order}"


@server.tool(annotations=ToolAnnotations(idempotentHint=True))
def send_note(order: str, text: str) -> str:
    """Sends a note to the customer (not in the tools file)."""
    return f"sent to {order}"


if __name__ == "__main__":
    if os.environ.get("REFUND_PIDFILE"):
        with open(os.environ["REFUND_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
    server.run()
