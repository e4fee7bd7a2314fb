"""Drives `host mcp --compose-ceiling` with the official MCP Python SDK
(`mcp` on PyPI), a client nobody here wrote, over stdio, and prints what the
server answered as one JSON object for tests/e2e/compose.rs to check.

Usage: compose.py CONFIG.json, where CONFIG holds {"command", "args", "env",
"cwd"} for the server and "exercise":
- "compose": the compose resources and prompt read, then `scenario` (TOML
  text) checked with `dry_run`, sent as JSON (`scenario_json`) checked the
  same way, and run with a progress token: its progress notifications and
  its result; then `approval`, if given, called once (it waits);
- "hostile": each of `cases` ({"name", "scenario"}: TOML text or a JSON
  value) sent to `scenario_compose`, and what came back, with the files of
  the component cache `cache_dir` before the first and after the last.
"""

import json
import os
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def report(result):
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": "\n".join(getattr(b, "text", "") for b in result.content),
    }


async def compose(session, config):
    out = {}
    tools = await session.list_tools()
    out["tools"] = sorted(tool.name for tool in tools.tools)
    compose_tool = next(t for t in tools.tools if t.name == "scenario_compose")
    out["tool"] = {
        "input_schema": compose_tool.input_schema,
        "annotations": compose_tool.annotations.model_dump(exclude_none=True),
    }
    listed = await session.list_resources()
    out["resources"] = [str(r.uri) for r in listed.resources]
    out["read"] = {}
    for uri in [
        "skillhost://compose/scenario-schema",
        "skillhost://compose/skills",
        "skillhost://compose/ceiling",
        "skillhost://compose/example",
    ]:
        read = await session.read_resource(uri)
        out["read"][uri] = {"mime_type": read.contents[0].mime_type, "text": read.contents[0].text}
    prompts = await session.list_prompts()
    out["prompts"] = [p.name for p in prompts.prompts]
    prompt = await session.get_prompt("compose_scenario", {"goal": "review papers on a topic"})
    out["prompt"] = prompt.messages[0].content.text

    checked = await session.call_tool(
        "scenario_compose",
        {"scenario": config["scenario"], "input": config["input"], "dry_run": True},
    )
    out["dry_run"] = report(checked)
    checked = await session.call_tool(
        "scenario_compose",
        {"scenario": config["scenario_json"], "input": config["input"], "dry_run": True},
    )
    out["dry_run_json"] = report(checked)

    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    ran = await session.call_tool(
        "scenario_compose",
        {"scenario": config["scenario"], "input": config["input"]},
        progress_callback=on_progress,
    )
    out["run"] = report(ran)
    out["progress"] = progress
    if "approval" in config:
        waiting = await session.call_tool(
            "scenario_compose", {"scenario": config["approval"], "input": {}}
        )
        out["approval"] = report(waiting)
    return out


def cache_files(folder):
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, _, names in os.walk(folder)
        for name in names
    )


async def hostile(session, config):
    # The server has loaded (and compiled) what it offers before it answers
    # `initialize`: what the cache holds now is all it should ever hold.
    out = {"cases": {}, "cache_before": cache_files(config["cache_dir"])}
    for case in config["cases"]:
        result = await session.call_tool(
            "scenario_compose", {"scenario": case["scenario"], "input": {"message": "hi"}}
        )
        out["cases"][case["name"]] = report(result)
    out["cache_after"] = cache_files(config["cache_dir"])
    return out


async def main():
    with open(sys.argv[1]) as f:
        config = json.load(f)
    params = StdioServerParameters(
        command=config["command"],
        args=config["args"],
        env=config.get("env"),
        cwd=config.get("cwd"),
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            exercise = {"compose": compose, "hostile": hostile}[config["exercise"]]
            out = await exercise(session, config)
    print(json.dumps(out))


anyio.run(main)
