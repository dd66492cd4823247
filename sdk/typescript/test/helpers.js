// What the SDK's end-to-end tests share: the local stack named by
// RUNLEDGER_LOCAL (or .runledger/local.json upward), a client, quick jobs,
// polling with a deadline, and a worker whose handlers are chosen by job.

import { randomBytes } from 'node:crypto';
import { SQSClient } from '@aws-sdk/client-sqs';

import { RunledgerClient, Worker, loadLocal } from '../src/index.js';

export const info = loadLocal();
if (!info) throw new Error('no local stack: run `make run` first, or set RUNLEDGER_LOCAL to its local.json');
// Patient: on a loaded machine an answer may take many seconds.
export const client = new RunledgerClient({ timeoutMs: 90_000 });

/** A job name no earlier run of the suite used. */
export function uniq(prefix) {
  return `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
}

/** A job that retries and loses its lease quickly, yet keeps it on a loaded machine. */
export function quickJob(name, over = {}) {
  return {
    name,
    pool: 'default',
    payload: { job: name },
    retry: { max_attempts: 2, initial_interval: '200ms', jitter: 'none' },
    timeouts: { heartbeat: '6s', queue: '1m', cancel: '5s', run: '2m' },
    evidence_window: '1s',
    ...over,
  };
}

/** Polls fn every intervalMs until it answers something truthy, for at most timeoutMs. */
export async function until(what, fn, timeoutMs = 60_000, intervalMs = 100) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${last.message})` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Waits until the run's execution_state is one of states; answers the run as read. */
export function runEnds(id, states = ['SUCCEEDED', 'FAILED', 'CANCELLED'], timeoutMs = 60_000, intervalMs = 250) {
  return until(`run ${id} in ${states}`, async () => {
    const r = await client.getRun(id);
    return states.includes(r.run.execution_state) ? r : null;
  }, timeoutMs, intervalMs);
}

/** A logger that keeps its records. */
export function captureLogger() {
  const records = [];
  const add = (level) => (msg, fields = {}) => records.push({ level, msg, ...fields });
  return { records, debug: add('debug'), info: add('info'), warn: add('warn'), error: add('error') };
}

/** An SQS client on the stack's emulator that records what it sent. */
export function recordingSQS() {
  const sqs = new SQSClient({ endpoint: info.sqs_endpoint, region: info.region ?? 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
  const calls = [];
  const send = sqs.send.bind(sqs);
  sqs.send = async (cmd, o) => {
    const out = await send(cmd, o);
    calls.push({ name: cmd.constructor.name, input: cmd.input, output: out });
    return out;
  };
  return { sqs, calls };
}

/**
 * Starts a worker on the default pool whose handler is handlers[task.job]
 * (an attempt of another job, left over from an earlier test, succeeds),
 * and stops it when the test ends.
 */
export function startWorker(t, handlers, o = {}) {
  const logger = o.logger ?? captureLogger();
  const w = new Worker({
    concurrency: 8,
    pollWaitMs: 1000,
    shutdownGraceMs: 2000,
    stopTimeoutMs: 2000,
    logger,
    ...o,
    handler: (task) => (handlers[task.job] ?? (() => {}))(task),
  });
  const running = w.run();
  t.after(async () => {
    await w.stop();
    await running;
  });
  return { worker: w, logger };
}
