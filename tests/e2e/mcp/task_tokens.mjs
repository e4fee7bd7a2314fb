// Drives `host mcp` (over streamable HTTP or stdio) with the official MCP
// TypeScript SDK (`@modelcontextprotocol/sdk`, pinned in package.json): the
// streaming scenario `stream` called as a task (with a progress token),
// then `tasks/result` at once, while it works. Records, in the order the
// client heard them, the log messages (`logging/setLevel` info first),
// the progress and the result; then a plain call of the same tool, and a
// `tasks/result` of a task no one created. Prints it all as one JSON
// object for tests/e2e/streaming.rs to check.
//
// Usage: node task_tokens.mjs [--tool NAME] TARGET [RESULT_TARGET]
//   --tool NAME    the tool to call instead of `stream` (a scenario that
//                  runs `stream` as a subgraph, say)
//   TARGET         a running `host mcp --http` URL, or a file with the
//                  stdio parameters ({"command", "args", "env", "cwd"})
//   RESULT_TARGET  another server's URL on the same store: the task is
//                  created through TARGET and its result asked of this one
//                  (which did not run it), by a second client

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const tool = args[0] === '--tool' ? args.splice(0, 2)[1] : 'stream';
const [target, resultTarget] = args;

function transportOf(where) {
  return /^https?:/.test(where)
    ? new StreamableHTTPClientTransport(new URL(where))
    : new StdioClientTransport(JSON.parse(readFileSync(where, 'utf8')));
}

// Everything heard, in order, by either client.
const heard = [];

async function connect(where) {
  const client = new Client({ name: 'skillhost-e2e', version: '0.0.0' });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
    heard.push({ kind: 'log', ...note.params });
  });
  await client.connect(transportOf(where));
  await client.setLoggingLevel('info');
  return client;
}

const client = await connect(target);
const reader = resultTarget ? await connect(resultTarget) : client;
const out = {};

// The task, created with a progress token (the SDK's: `onprogress`), and
// its id taken at once.
let taskId;
for await (const message of client.experimental.tasks.callToolStream(
  { name: tool, arguments: {} },
  CallToolResultSchema,
  {
    task: {},
    onprogress: (progress) => heard.push({ kind: 'progress', ...progress }),
  },
)) {
  if (message.type === 'taskCreated') {
    taskId = message.task.taskId;
    break;
  }
  if (message.type === 'error') throw message.error;
}
out.task_id = taskId;

// While it works: tasks/result, which hears the run until its result.
const result = await reader.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
heard.push({ kind: 'result', result });
out.heard = heard.splice(0);

// The same tool, plainly (tokens heard as log messages of the call).
out.plain = await client.callTool({ name: tool, arguments: {} });
out.plain_heard = heard.splice(0);

// A task no one created: an error, and nothing heard.
try {
  await reader.experimental.tasks.getTaskResult('no-such-task', CallToolResultSchema);
  out.unknown = null;
} catch (error) {
  out.unknown = { code: error.code, message: String(error.message) };
}
out.unknown_heard = heard.splice(0);

await client.close();
if (reader !== client) await reader.close();
console.log(JSON.stringify(out));
