// Drives `host mcp --http --compose-ceiling` with the official MCP
// TypeScript SDK (`@modelcontextprotocol/sdk`, pinned in package.json), a
// client nobody here wrote, through MCP tasks: a scenario the client
// composes from offered skills (three nodes) created as a task, followed to
// its result; a composed scenario that waits at an approval node, answered
// with run_answer; a composed scenario the checker refuses, called plainly
// and as a task. Prints what the server answered as one JSON object for
// tests/e2e/compose.rs to check.
//
// Usage: node compose.mjs URL CASES.json, CASES holding {"three", "approval",
// "refused"}: scenario texts.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { readFileSync } from 'node:fs';

const [url, casesFile] = process.argv.slice(2);
const cases = JSON.parse(readFileSync(casesFile, 'utf8'));
const client = new Client({ name: 'skillhost-e2e-compose', version: '0.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const tasks = client.experimental.tasks;
const out = {};

out.task_support = (await client.listTools()).tools
  .filter((t) => t.name === 'scenario_compose')
  .map((t) => t.execution?.taskSupport ?? null);

// The three-node scenario as a task, through the SDK's own loop.
const stream = [];
for await (const message of tasks.callToolStream(
  { name: 'scenario_compose', arguments: { scenario: cases.three, input: { message: 'hello' } } },
  CallToolResultSchema,
  { task: { ttl: 600000 } },
)) {
  if (message.type === 'taskCreated') stream.push({ type: message.type, task: message.task });
  else if (message.type === 'taskStatus') stream.push({ type: message.type, status: message.task.status });
  else if (message.type === 'result') stream.push({ type: message.type, result: message.result });
  else stream.push({ type: message.type, error: String(message.error) });
}
out.stream = stream;
const threeId = stream[0]?.task?.taskId;
out.three_task = await tasks.getTask(threeId);
out.three_result = await tasks.getTaskResult(threeId, CallToolResultSchema);

// A composed approval: input_required, answered, completed.
let approvalId = null;
for await (const message of tasks.callToolStream(
  { name: 'scenario_compose', arguments: { scenario: cases.approval, input: {} } },
  CallToolResultSchema,
  { task: {} },
)) {
  if (message.type === 'taskCreated') {
    approvalId = message.task.taskId;
    break;
  }
  if (message.type === 'error') throw message.error;
}
for (let i = 0; i < 600; i++) {
  const task = await tasks.getTask(approvalId);
  out.approval_waiting = task;
  if (task.status !== 'working') break;
  await new Promise((resolve) => setTimeout(resolve, task.pollInterval ?? 200));
}
out.approval_answer = await client.callTool({
  name: 'run_answer',
  arguments: { run_id: approvalId, answer: { approved: true }, by: 'ts-sdk' },
});
out.approval_result = await tasks.getTaskResult(approvalId, CallToolResultSchema);

// Refused: plainly, and asked as a task (no task is created).
out.refused = await client.callTool({
  name: 'scenario_compose',
  arguments: { scenario: cases.refused, input: {} },
});
const asTask = [];
try {
  for await (const message of tasks.callToolStream(
    { name: 'scenario_compose', arguments: { scenario: cases.refused, input: {} } },
    CallToolResultSchema,
    { task: {} },
  )) {
    if (message.type === 'result') asTask.push({ type: message.type, result: message.result });
    else if (message.type === 'taskCreated') asTask.push({ type: message.type });
    else asTask.push({ type: message.type, error: String(message.error ?? '') });
  }
} catch (error) {
  asTask.push({ type: 'thrown', error: String(error) });
}
out.refused_as_task = asTask;
out.listed = (await tasks.listTasks()).tasks.map((t) => t.taskId);
await client.close();
console.log(JSON.stringify(out));
