"""The official ACP Python SDK's client driving `cashcode acp` (tests/suite/acp.rs runs it).

Usage: client.py <scenario> <workspace> <cashcode> [flags for `cashcode acp`...]
Prints one JSON object per step on stdout; the Rust test checks them.
"""

import asyncio
import json
import sys
from typing import Any

import acp
from acp import schema


def report(step: str, **value: Any) -> None:
    print(json.dumps({"step": step, **value}), flush=True)


class TestClient:
    """Collects the agent's message chunks and allows every permission request once."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.asked = 0

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.asked += 1
        allow = next(o for o in options if o.kind == "allow_once")
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=allow.option_id)
        )

    async def session_update(self, session_id, update, **kwargs):
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunks.append(update.content.text)


async def main() -> None:
    scenario, workspace, binary, *flags = sys.argv[1:]
    client = TestClient()
    async with acp.spawn_agent_process(lambda _agent: client, binary, "acp", *flags) as (conn, _proc):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        report("initialize", protocolVersion=init.protocol_version)
        session = await conn.new_session(cwd=workspace, mcp_servers=[])
        for step, words in (("plain", "hello"), ("allow", "run it")):
            client.chunks.clear()
            before = client.asked
            res = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(words)])
            report(step, stopReason=res.stop_reason, answer="".join(client.chunks), asked=client.asked - before)
        listed = await conn.list_sessions(cwd=workspace)
        report("list", count=len(listed.sessions))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # reported to the test, which prints it
        report("failed", message=repr(e))
        sys.exit(1)
