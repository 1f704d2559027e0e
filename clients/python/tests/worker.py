"""A worker process for the SIGKILL test: runs one guarded refund and prints the outcome.

    IDEMWATCH_URL, PROVIDER_URL, INTENT (JSON), ARGS (JSON), MODE=crash|run, RETRIES

MODE=crash calls the provider, prints EFFECT once the refund exists, and then waits to be
killed before it can settle. MODE=run prints one JSON line with the outcome.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import idemwatch  # noqa: E402
from refunds import refund_tool  # noqa: E402


def main() -> None:
    intent = idemwatch.Intent(**json.loads(os.environ["INTENT"]))
    args = json.loads(os.environ["ARGS"])
    client = idemwatch.Client(os.environ["IDEMWATCH_URL"], worker=f"worker-{os.getpid()}")
    tool = refund_tool(
        client, os.environ["PROVIDER_URL"], in_flight_retries=int(os.environ.get("RETRIES", "3"))
    )
    if os.environ.get("MODE") == "crash":
        inner = tool.execute

        def execute(key: str, a: dict) -> object:
            result = inner(key, a)
            print("EFFECT", flush=True)
            time.sleep(600)  # killed here: after the effect, before settling
            return result

        tool.execute = execute
    try:
        outcome = tool.run(intent, args)
        print(json.dumps({"result": outcome.result, "replayed": outcome.replayed}), flush=True)
    except idemwatch.IdemwatchError as exc:
        print(json.dumps({"error": type(exc).__name__, "detail": str(exc)}), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
