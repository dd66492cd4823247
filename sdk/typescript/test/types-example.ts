// Compiled (not run) by types.test.js against src/index.d.ts: the
// documented uses type-check, and a misuse does not.
import { RunledgerClient, RunledgerError, TaskError, Worker, handleInvoke, stopCauses, type FenceCheck, type Task } from '../src/index.js';

async function load(task: Task): Promise<void> {
  const day: unknown = task.params?.day;
  const check: FenceCheck = task.fence();
  check.ConditionCheck.TableName.toUpperCase();
  if (task.signal.reason === stopCauses.cancelRequested) return;
  task.setOutput({ day: String(day), n: task.index ?? 0, at: task.fencingDeadline.toISOString() });
  throw new TaskError('later', { retryable: true, category: 'not_ready', exitCode: 2 });
}

const w = new Worker({ handler: load, pool: 'default', concurrency: 2, stopTimeoutMs: 1000 });
void w.run().then(() => w.stop());
export const invoked = handleInvoke(load);
export const onQueue = (e: { Records: { messageId: string; body: string }[] }) => w.handleSQS(e);

const api = new RunledgerClient({ apiKey: 'k' });
void api.trigger('job', { params: { day: '2026-03-01' }, idempotencyKey: 'x' }).then((r) => r.tasks[0].output);
void api.getRun('r').catch((err: unknown) => err instanceof RunledgerError && err.code === 'not_found' && err.status === 404);
