// Drives `host mcp` (over streamable HTTP or stdio) with the official MCP
// TypeScript SDK (`@modelcontextprotocol/sdk`, pinned in package.json), a
// client nobody here wrote, through MCP tasks (protocol 2025-11-25): a
// scenario called as a task and followed to its result, a task cancelled,
// and an approval run that reaches input_required and is answered. Prints what the server
// answered as one JSON object for tests/e2e/mcp.rs to check.
//
// Usage: node tasks.mjs URL           (a running `host mcp --http`)
//        node tasks.mjs CONFIG.json   (starts `host mcp` over stdio:
//                                      {"command", "args", "env", "cwd"})

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { readFileSync } from 'node:fs';

const target = process.argv[2];
const transport = /^https?:/.test(target)
  ? new StreamableHTTPClientTransport(new URL(target))
  : new StdioClientTransport(JSON.parse(readFileSync(target, 'utf8')));
const client = new Client({ name: 'skillhost-e2e', version: '0.0.0' });
await client.connect(transport);
const tasks = client.experimental.tasks;
const out = {};

const listed = (await client.listTools()).tools;
out.tools = listed.map((t) => t.name).sort();
// What the server advertises: the tasks capability, and which tools take tasks.
out.tasks_capability = client.getServerCapabilities()?.tasks ?? null;
out.task_support = Object.fromEntries(listed.map((t) => [t.name, t.execution?.taskSupport ?? null]));

// A scenario as a task, through the SDK's own loop: created, polled with
// tasks/get until it ends, its result fetched with tasks/result.
const query = { query: 'retrieval augmented generation' };
const stream = [];
for await (const message of tasks.callToolStream(
  { name: 'research', arguments: query },
  CallToolResultSchema,
  { task: { ttl: 600000 } },
)) {
  if (message.type === 'taskCreated') stream.push({ type: message.type, task: message.task });
  else if (message.type === 'taskStatus') stream.push({ type: message.type, status: message.task.status });
  else if (message.type === 'result') stream.push({ type: message.type, result: message.result });
  else stream.push({ type: message.type, error: String(message.error) });
}
out.stream = stream;
const researchId = stream[0]?.task?.taskId;
out.research_task = await tasks.getTask(researchId);
out.research_result = await tasks.getTaskResult(researchId, CallToolResultSchema);
out.plain = await client.callTool({ name: 'research', arguments: query });

// Waits until task `id` is not working any more.
async function settled(id) {
  for (let i = 0; i < 600; i++) {
    const task = await tasks.getTask(id);
    if (task.status !== 'working') return task;
    await new Promise((resolve) => setTimeout(resolve, task.pollInterval ?? 200));
  }
  throw new Error(`task ${id} is still working`);
}

// Creates a task of tool `name` and returns its id at once.
async function create(name, args) {
  for await (const message of tasks.callToolStream(
    { name, arguments: args },
    CallToolResultSchema,
    { task: {} },
  )) {
    if (message.type === 'taskCreated') return message.task.taskId;
    if (message.type === 'error') throw message.error;
  }
  throw new Error('no task was created');
}

// An approval run: input_required, answered with run_answer, completed.
const approvalId = await create('approval', {});
out.approval_waiting = await settled(approvalId);
out.approval_answer = await client.callTool({
  name: 'run_answer',
  arguments: { run_id: approvalId, answer: { approved: true }, by: 'ts-sdk' },
});
out.approval_task = await tasks.getTask(approvalId);
out.approval_result = await tasks.getTaskResult(approvalId, CallToolResultSchema);

// Another, cancelled while it waits; a second cancel is refused.
const cancelId = await create('approval', { action: 'rollback' });
out.cancel_waiting = await settled(cancelId);
out.cancelled = await tasks.cancelTask(cancelId);
out.cancelled_task = await tasks.getTask(cancelId);
try {
  await tasks.cancelTask(cancelId);
  out.cancel_again = null;
} catch (error) {
  out.cancel_again = String(error);
}
try {
  await tasks.getTask('no-such-task');
  out.unknown_task = null;
} catch (error) {
  out.unknown_task = String(error);
}

out.listed = (await tasks.listTasks()).tasks.map((t) => ({ taskId: t.taskId, status: t.status }));
out.ids = { research: researchId, approval: approvalId, cancel: cancelId };
await client.close();
console.log(JSON.stringify(out));
