// Drives two `host mcp --http --stateless` servers on one Postgres store
// through a round-robin proxy (Debian's haproxy, which names the server
// that answered each response in `X-Served-By`) with the official MCP
// TypeScript SDK, through MCP tasks. Prints what it saw as one JSON object
// for tests/e2e/mcp/scale_out.rs to check.
//
// Usage: node scale_out.mjs URL approval
//          a task of `approval` created through one server, followed
//          (tasks/get), answered (run_answer) and read to its result
//          (tasks/result) through the other
//        node scale_out.mjs URL start
//          a task of `research` created; prints its id and which server took it
//        node scale_out.mjs URL result TASK_ID OTHER_RUN_ID
//          the task followed and read to its result, and the hostile cases:
//          a task id no server knows, a waiting run of a scenario not offered

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, phase, ...rest] = process.argv.slice(2);

// Which server answered each request, in order (haproxy's X-Served-By),
// and which answered the last POST (the requests below are sent one at a
// time; the SDK's GET for a standalone stream is not awaited by it).
const served = [];
let last = null;
const fetchRecording = async (input, init) => {
  const response = await fetch(input, init);
  const by = response.headers.get('x-served-by');
  let method = init?.method ?? 'GET';
  try {
    method = JSON.parse(init.body).method ?? method;
  } catch {}
  if (method !== 'GET') last = by;
  served.push({ method, by });
  return response;
};

const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: fetchRecording });
const client = new Client({ name: 'skillhost-scale-out', version: '0.0.0' });
await client.connect(transport);
// The SDK then tries a standalone stream (a GET, 405 without sessions) on
// its own: let it pass before counting on the proxy's alternation.
for (let i = 0; i < 200 && !served.some((s) => s.method === 'GET'); i++) {
  await new Promise((resolve) => setTimeout(resolve, 10));
}
const tasks = client.experimental.tasks;
const out = { session: transport.sessionId ?? null };

// Until the last request was answered by `server`, so that (round robin)
// the next one goes to the other.
async function nextToOtherThan(server) {
  for (let i = 0; i < 10 && last !== server; i++) await client.ping();
  if (last !== server) throw new Error(`the proxy does not alternate: ${JSON.stringify(served)}`);
}

// Calls `fn` and records which server answered it.
async function through(label, fn) {
  try {
    const value = await fn();
    out[label] = { by: last, value };
  } catch (error) {
    out[label] = { by: last, error: String(error) };
  }
}

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

if (phase === 'approval') {
  const id = await create('approval', { action: 'scale-out' });
  const creator = last;
  out.created = { by: creator, id };
  // Followed through the other, until it waits for its answer.
  out.followed = [];
  for (let i = 0; i < 300; i++) {
    await nextToOtherThan(creator);
    const task = await tasks.getTask(id);
    out.followed.push({ by: last, status: task.status });
    if (task.status !== 'working') break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await nextToOtherThan(creator);
  await through('answered', () =>
    client.callTool({
      name: 'run_answer',
      arguments: { run_id: id, answer: { approved: true }, by: 'scale-out' },
    }),
  );
  await nextToOtherThan(creator);
  await through('task', () => tasks.getTask(id));
  await nextToOtherThan(creator);
  await through('result', () => tasks.getTaskResult(id, CallToolResultSchema));
  // Hostile: a task id no server's store knows, asked of each server.
  await through('unknown', () => tasks.getTask('no-such-task'));
  await through('unknown_other', () => tasks.getTask('no-such-task'));
  // Without sessions a level set is not remembered, but a plain call still
  // hears its progress, on its own response stream.
  await through('set_level', () => client.setLoggingLevel('info'));
  const progress = [];
  await through('plain', () =>
    client.callTool({ name: 'approval', arguments: { action: 'plain' } }, CallToolResultSchema, {
      onprogress: (note) => progress.push(note),
    }),
  );
  out.progress = progress;
} else if (phase === 'start') {
  const id = await create('research', { query: 'retrieval augmented generation' });
  out.created = { by: last, id };
} else if (phase === 'result') {
  const [id, otherRun] = rest;
  await through('task', () => tasks.getTask(id));
  await through('result', () => tasks.getTaskResult(id, CallToolResultSchema));
  await through('result_again', () => tasks.getTaskResult(id, CallToolResultSchema));
  // Hostile: a task id no server's store knows.
  await through('unknown_result', () => tasks.getTaskResult('no-such-task', CallToolResultSchema));
  await through('unknown_cancel', () => tasks.cancelTask('no-such-task'));
  // A waiting run of a scenario these servers do not offer, in the same
  // store: read as a task, not answered here, cancelled, its result read.
  await through('other_task', () => tasks.getTask(otherRun));
  await through('other_answer', () =>
    client.callTool({
      name: 'run_answer',
      arguments: { run_id: otherRun, answer: { approved: true } },
    }),
  );
  await through('other_cancel', () => tasks.cancelTask(otherRun));
  await through('other_result', () => tasks.getTaskResult(otherRun, CallToolResultSchema));
} else {
  throw new Error(`unknown phase ${phase}`);
}
out.served = served;
await client.close();
console.log(JSON.stringify(out));
