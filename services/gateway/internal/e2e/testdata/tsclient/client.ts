// An integrator's client of the orderflow gateway: typed by schema.d.ts,
// which openapi-typescript generates from the served /openapi.json, and
// calling through openapi-fetch. It submits an order split, polls the task
// until it is terminal, and sends a bad submit to read the typed error
// body. It prints one JSON object; the Go e2e test asserts on it.
import createClient from 'openapi-fetch';
import type { components, paths } from './schema.js';

type Task = components['schemas']['v1Task'];
type ErrorInfo = components['schemas']['ErrorInfo'];
type ErrorCode = components['schemas']['ErrorCode'];

declare const process: { env: Record<string, string | undefined>; stdout: { write(s: string): void }; exitCode?: number };

const base = process.env.ORDERFLOW_URL ?? 'http://127.0.0.1:8080';
const token = process.env.ORDERFLOW_TOKEN ?? '';
const client = createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${token}` } });

async function main(): Promise<void> {
  const submitted = await client.POST('/v1/order-splits', {
    body: {
      orderCode: `TS-${Date.now()}`,
      requestId: `ts-${Date.now()}`,
      items: [
        { itemCode: 'A1', sku: 'SKU-TEA-500G', quantity: 2 },
        { itemCode: 'A4', sku: 'SKU-NOPE', quantity: 1 },
      ],
    },
  });
  if (submitted.error || !submitted.data?.taskId) {
    throw new Error(`submit: ${JSON.stringify(submitted.error)}`);
  }
  const taskId: string = submitted.data.taskId;

  // Poll as the page does, every 200 ms here, at most 150 tries.
  let task: Task | undefined;
  for (let i = 0; i < 150; i++) {
    const got = await client.GET('/v1/tasks/{taskId}', { params: { path: { taskId } } });
    if (got.error) throw new Error(`poll: ${JSON.stringify(got.error)}`);
    task = got.data;
    if (task?.status && task.status !== 'TASK_STATUS_PROCESSING') break;
    await new Promise((resolve) => { setTimeout(resolve, 200); });
  }

  // A bad submit: the error body is typed, its ErrorInfo names the field.
  const bad = await client.POST('/v1/order-splits', {
    body: { orderCode: 'TS-BAD', items: [{ itemCode: 'A1', sku: 'SKU-TEA-500G', quantity: 0 }] },
  });
  const info = bad.error?.details?.find((d): d is ErrorInfo => (d as ErrorInfo)['@type'] === 'type.googleapis.com/google.rpc.ErrorInfo');
  const failures: { itemCode?: string; errorCode?: ErrorCode }[] = task?.result?.failures ?? [];

  process.stdout.write(`${JSON.stringify({
    taskId,
    status: task?.status,
    total: task?.result?.total,
    succeeded: task?.result?.succeeded,
    failures: failures.map((f) => ({ itemCode: f.itemCode, errorCode: f.errorCode })),
    badStatus: bad.response.status,
    badReason: info?.reason,
    badField: info?.metadata?.field,
  })}\n`);
}

main().catch((err: unknown) => {
  process.stdout.write(`${JSON.stringify({ error: String(err) })}\n`);
  process.exitCode = 1;
});
