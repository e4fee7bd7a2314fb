"""Drives `host mcp` with the official MCP Python SDK (`mcp` on PyPI), a
client nobody here wrote, over stdio or streamable HTTP, and prints what the
server answered as one JSON object for tests/e2e/mcp.rs to check.

Usage: client.py CONFIG.json, where CONFIG holds either
{"transport": "stdio", "command": ..., "args": [...], "env": {...}, "cwd": ...}
or {"transport": "http", "url": "http://127.0.0.1:PORT/mcp", "headers": {...}},
and optionally "exercise": "brief" (list the tools and call `echo` only; a
failure to connect is reported as {"refused": MESSAGE} instead of raised),
"runs" (a research run and its status, an approval run answered),
"unavailable" (the instructions, the tools, a call of `research-llm`) or
"follow" (research runs followed by progress and, once a level is set,
by their skills' log messages).
"""

import json
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def text_of(result):
    return "\n".join(getattr(block, "text", "") for block in result.content)


def call_report(result):
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": text_of(result),
    }


async def exercise(session):
    out = {}
    init = await session.initialize()
    out["server"] = init.server_info.name
    tools = await session.list_tools()
    out["tools"] = {
        tool.name: {
            "description": tool.description,
            "input_schema": tool.input_schema,
            "output_schema": tool.output_schema,
            "annotations": tool.annotations.model_dump(exclude_none=True)
            if tool.annotations
            else None,
        }
        for tool in tools.tools
    }

    # A scenario: a real, checkpointed run. The SDK checks structuredContent
    # against the advertised outputSchema itself.
    research = await session.call_tool(
        "research", {"query": "retrieval augmented generation"}
    )
    out["research"] = call_report(research)
    if not research.is_error:
        run_id = research.structured_content["run_id"]
        status = await session.call_tool("run_status", {"run_id": run_id})
        out["status"] = call_report(status)
        resources = await session.list_resources()
        out["resources"] = [str(r.uri) for r in resources.resources]
        report_uri = research.structured_content["artifacts"][0]["uri"]
        read = await session.read_resource(report_uri)
        out["report"] = [
            {"mime_type": c.mime_type, "text": getattr(c, "text", None)}
            for c in read.contents
        ]

    # A run that waits at an approval node: its id comes back, and the run
    # is answered (badly, then well) and continued through MCP.
    waiting = await session.call_tool("approval", {})
    out["approval"] = call_report(waiting)
    if not waiting.is_error:
        run_id = waiting.structured_content["run_id"]
        out["approval_bad_answer"] = call_report(
            await session.call_tool(
                "run_answer", {"run_id": run_id, "answer": {"approved": "yes"}}
            )
        )
        out["approval_waiting_status"] = call_report(
            await session.call_tool("run_status", {"run_id": run_id})
        )
        out["approval_answered"] = call_report(
            await session.call_tool(
                "run_answer",
                {"run_id": run_id, "answer": {"approved": True}, "by": "agent"},
            )
        )

    # Another waiting run, cancelled through MCP.
    second = await session.call_tool("approval", {"action": "rollback"})
    if not second.is_error:
        run_id = second.structured_content["run_id"]
        out["cancel"] = call_report(
            await session.call_tool("run_cancel", {"run_id": run_id, "by": "agent"})
        )
        out["cancelled_status"] = call_report(
            await session.call_tool("run_status", {"run_id": run_id})
        )

    # A run that fails (too few papers): isError naming the node.
    out["research_failed"] = call_report(
        await session.call_tool("research", {"query": "zebrafish husbandry"})
    )

    # Arguments that do not fit the scenario's [input].
    out["research_bad"] = call_report(await session.call_tool("research", {"query": 7}))

    # Skills: one that answers, one whose `run` returns `err`, bad arguments.
    out["echo"] = call_report(
        await session.call_tool("echo", {"message": "hi", "repeat": 2})
    )
    out["echo_bad"] = call_report(
        await session.call_tool("echo", {"message": "hi", "repeat": "two"})
    )
    out["fail"] = call_report(await session.call_tool("fail", {"mode": "error"}))
    out["unknown_run"] = call_report(
        await session.call_tool("run_status", {"run_id": "no-such-run"})
    )
    try:
        await session.call_tool("no_such_tool", {})
        out["unknown_tool"] = None
    except MCPError as e:
        out["unknown_tool"] = str(e)
    try:
        await session.read_resource("skillhost://runs/nope/artifacts/report.md")
        out["unknown_resource"] = None
    except MCPError as e:
        out["unknown_resource"] = str(e)
    return out


async def brief(session):
    """Connects, lists the tools and calls `echo`: enough to show the
    transport let the session through."""
    init = await session.initialize()
    tools = await session.list_tools()
    echo = await session.call_tool("echo", {"message": "hi", "repeat": 2})
    return {
        "server": init.server_info.name,
        "tools": sorted(tool.name for tool in tools.tools),
        "echo": call_report(echo),
    }


async def runs(session):
    """A research run and its status; an approval run that waits, its
    status, and the answer that continues it: what a store must hold."""
    await session.initialize()
    out = {}
    research = await session.call_tool(
        "research", {"query": "retrieval augmented generation"}
    )
    out["research"] = call_report(research)
    run_id = research.structured_content["run_id"]
    out["status"] = call_report(
        await session.call_tool("run_status", {"run_id": run_id})
    )
    waiting = await session.call_tool("approval", {})
    out["approval"] = call_report(waiting)
    run_id = waiting.structured_content["run_id"]
    out["approval_status"] = call_report(
        await session.call_tool("run_status", {"run_id": run_id})
    )
    out["approval_answered"] = call_report(
        await session.call_tool(
            "run_answer", {"run_id": run_id, "answer": {"approved": True}}
        )
    )
    return out


async def unavailable(session):
    """The instructions, the tools, a call of a scenario that is not
    offered because it cannot run here, and `echo`: what a server given a
    scenario it cannot run shows."""
    init = await session.initialize()
    tools = await session.list_tools()
    out = {
        "instructions": init.instructions,
        "tools": sorted(tool.name for tool in tools.tools),
    }
    try:
        await session.call_tool("research-llm", {"query": "x"})
        out["unavailable_call"] = None
    except MCPError as e:
        out["unavailable_call"] = str(e)
    out["echo"] = call_report(
        await session.call_tool("echo", {"message": "hi", "repeat": 2})
    )
    return out


LOGS = []


async def on_log(params):
    LOGS.append(
        {"level": params.level, "logger": params.logger, "data": params.data}
    )


async def follow(session):
    """A scenario call with a progress token before any log level is set
    (progress, no logs), after `logging/setLevel` to info (progress and
    the skills' info lines), and at warning (none of those lines)."""
    await session.initialize()
    out = {}
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    query = {"query": "retrieval augmented generation"}
    quiet = await session.call_tool("research", query, progress_callback=on_progress)
    out["quiet"] = call_report(quiet)
    out["quiet_progress"] = list(progress)
    progress.clear()
    await session.set_logging_level("info")
    loud = await session.call_tool("research", query, progress_callback=on_progress)
    out["loud"] = call_report(loud)
    out["loud_progress"] = list(progress)
    await session.set_logging_level("warning")
    out["warning"] = call_report(await session.call_tool("research", query))
    # Over streamable HTTP, log messages travel on the session's own
    # stream, not the call's: give the last ones time to arrive. Each
    # names its run, which tells the three calls' apart.
    await anyio.sleep(1)
    out["logs"] = list(LOGS)
    return out


async def stream(session):
    """A streaming scenario's call at info: each token the skill was handed
    a log message of logger `tokens`, a failed attempt's followed by their
    discard (warning)."""
    await session.initialize()
    await session.set_logging_level("info")
    out = {"result": call_report(await session.call_tool("stream", {}))}
    await anyio.sleep(1)
    out["logs"] = [log for log in LOGS if log["logger"] == "tokens"]
    return out


def messages(error):
    """The messages of an error and of those it groups (anyio's task
    groups wrap the transport's failure)."""
    found = [f"{type(error).__name__}: {error}"]
    for inner in getattr(error, "exceptions", ()):
        found.extend(messages(inner))
    if error.__cause__ is not None:
        found.extend(messages(error.__cause__))
    return found


async def main():
    with open(sys.argv[1]) as f:
        config = json.load(f)
    if config["transport"] == "stdio":
        params = StdioServerParameters(
            command=config["command"],
            args=config["args"],
            env=config["env"],
            cwd=config["cwd"],
        )
        transport = stdio_client(params)
    else:
        client = create_mcp_http_client(headers=config.get("headers"))
        transport = streamable_http_client(config["url"], http_client=client)
    run = {
        "brief": brief,
        "runs": runs,
        "unavailable": unavailable,
        "follow": follow,
        "stream": stream,
    }.get(
        config.get("exercise"), exercise
    )
    try:
        async with transport as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write, logging_callback=on_log) as session:
                with anyio.fail_after(60):
                    out = await run(session)
    except Exception as error:  # noqa: BLE001 - reported for the test to check
        if run is not brief:
            raise
        out = {"refused": "\n".join(messages(error))}
    out["transport"] = config["transport"]
    print(json.dumps(out))


anyio.run(main)
