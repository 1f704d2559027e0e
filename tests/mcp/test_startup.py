"""Reasons the proxy refuses to start (docs/MCP.md): each is a non-zero exit with one
clear `error:` line on stderr naming the problem, no panic, no backtrace, and nothing
else on stderr at the default log level (rmcp's own info lines are quietened)."""

import re
import subprocess
import sys

import pytest

from conftest import BIN, HERE

ODD = str(HERE / "odd_upstream.py")


def start(env, upstream, tools=None):
    if tools is not None:
        env.tools.write_text(tools)
    return subprocess.run(
        [BIN, "mcp-proxy", "--tools-file", str(env.tools), "--database-url", f"sqlite://{env.guard_db}?mode=rwc",
         "--", *upstream],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={"REFUND_DB": str(env.refunds), "PATH": "/usr/bin:/bin", "RUST_BACKTRACE": "1"},
    )


def refused(started, *naming):
    """One message: stderr is `error: …` and nothing else (no log line; a TOML error
    may quote the line at fault below its first line)."""
    assert started.returncode == 1, (started.returncode, started.stderr)
    text = started.stderr
    assert text.startswith("error: ") and text.count("error: ") == 1, text
    assert not re.search(r"^\S*\d{4}-\d\d-\d\dT", text, re.M), text  # a tracing line
    for words in naming:
        assert words in text, text
    assert "panicked" not in text and "backtrace" not in text.lower()
    assert started.stdout == ""
    return text


def test_an_upstream_command_that_does_not_exist(env):
    refused(start(env, ["/nonexistent/refund-server", "--port", "1"]),
            "cannot start the upstream MCP server `/nonexistent/refund-server --port 1`", "No such file")


def test_an_upstream_that_exits_at_once(env):
    refused(start(env, ["/bin/sh", "-c", "exit 3"]),
            "the upstream MCP server `/bin/sh -c exit 3` did not complete initialize")


def test_an_upstream_that_speaks_another_protocol_version(env):
    line = refused(start(env, [sys.executable, ODD, "old-protocol"]),
                   "speaks MCP protocol version 2023-01-01, which this proxy does not")
    assert "2025-06-18" in line  # the versions it does speak


def test_an_upstream_that_lists_no_tools(env):
    refused(start(env, [sys.executable, ODD, "no-tools"]), "the upstream MCP server lists no tools")


def test_a_lookup_tool_the_upstream_does_not_list(env):
    tools = env.tools.read_text().replace('lookup = { tool = "find_refund"', 'lookup = { tool = "find_refunds"')
    refused(start(env, [sys.executable, str(HERE / "refund_server.py")], tools),
            'tool "issue_refund": lookup.tool "find_refunds" is not a tool of the upstream server',
            str(env.tools))


@pytest.mark.parametrize("mistake, naming", [
    ('[tools.issue_refund]\nkind = "sometimes"\n', "unknown variant `sometimes`, expected one of `read_only`"),
    ('[mcp]\ntrust_annotations = false\n[tools.get_order]\nkind = "read_only"\n', "no tenant"),
])
def test_a_tools_file_mistake(env, mistake, naming):
    refused(start(env, [sys.executable, str(HERE / "refund_server.py")], mistake), naming)
