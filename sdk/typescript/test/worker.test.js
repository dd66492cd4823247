// The worker end to end against the local stack: a run through the
// worker, inputs, retries, cancel, refused claims, a stale completion,
// and the Lambda helpers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ChangeMessageVisibilityCommand, DeleteMessageCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';

import { TaskError, Worker, handleInvoke } from '../src/index.js';
import { captureLogger, client, info, quickJob, recordingSQS, runEnds, startWorker, uniq, until } from './helpers.js';

test('a job runs end to end through the worker: params in, output out', async (t) => {
  const name = uniq('ts-e2e');
  const seen = [];
  const { worker } = startWorker(t, {
    [name]: (task) => {
      seen.push(task);
      task.setOutput({ greeting: `hello ${task.params.who}`, payload: task.payload });
    },
  });
  await client.createJob(quickJob(name));
  const { run } = await client.trigger(name, { params: { who: 'ts' } });
  const done = await runEnds(run.id);
  assert.equal(done.run.execution_state, 'SUCCEEDED');
  assert.deepEqual(done.tasks[0].output, { greeting: 'hello ts', payload: { job: name } });
  assert.equal(done.tasks[0].attempts[0].worker_id, worker.id);
  assert.equal(seen.length, 1);
  assert.equal(seen[0].run, run.id);
  assert.equal(seen[0].task, 'main');
  assert.equal(seen[0].attempt, 1);
  assert.equal(seen[0].job, name);
  assert.ok(seen[0].fencingDeadline.getTime() > Date.now() - 60_000, 'a fencing deadline was set');
});

test('a task gets its upstream task output as input', async (t) => {
  const name = uniq('ts-inputs');
  const got = {};
  startWorker(t, {
    [name]: (task) => {
      got[task.task] = task.inputs;
      if (task.task === 'a') task.setOutput({ n: 41 });
      else task.setOutput({ n: task.inputs.a.n + 1 });
    },
  });
  await client.createJob(quickJob(name, { tasks: [{ id: 'a' }, { id: 'b', depends_on: ['a'] }] }));
  const { run } = await client.trigger(name);
  const done = await runEnds(run.id);
  assert.equal(done.run.execution_state, 'SUCCEEDED');
  assert.deepEqual(got.a, {});
  assert.deepEqual(got.b, { a: { n: 41 } });
  assert.deepEqual(done.tasks.find((x) => x.task === 'b').output, { n: 42 });
});

test('a failing handler is retried; a permanent failure is not', async (t) => {
  const flaky = uniq('ts-flaky');
  const broken = uniq('ts-broken');
  const calls = { [flaky]: 0, [broken]: 0 };
  startWorker(t, {
    [flaky]: (task) => {
      calls[flaky]++;
      if (task.attempt === 1) throw new TaskError('input not there yet', { category: 'input_missing', exitCode: 3 });
    },
    [broken]: () => {
      calls[broken]++;
      throw new TaskError('bad config', { retryable: false, category: 'bad_config' });
    },
  });
  await client.createJob(quickJob(flaky));
  await client.createJob(quickJob(broken));
  const a = (await client.trigger(flaky)).run.id;
  const b = (await client.trigger(broken)).run.id;
  const ra = await runEnds(a);
  assert.equal(ra.run.execution_state, 'SUCCEEDED');
  assert.equal(ra.tasks[0].attempt, 2);
  assert.equal(ra.tasks[0].attempts[0].state, 'FAILED');
  assert.equal(ra.tasks[0].attempts[0].error_category, 'input_missing');
  assert.equal(ra.tasks[0].attempts[0].exit_code, 3);
  assert.equal(calls[flaky], 2);
  const rb = await runEnds(b);
  assert.equal(rb.run.execution_state, 'FAILED');
  assert.equal(rb.tasks[0].attempts.length, 1);
  assert.equal(rb.tasks[0].attempts[0].error_category, 'bad_config');
  assert.equal(calls[broken], 1);
});

test('a cancel request aborts the handler signal with a cancel reason', async (t) => {
  const name = uniq('ts-cancel');
  let reason;
  let started = false;
  startWorker(t, {
    [name]: async (task) => {
      started = true;
      await new Promise((resolve) => task.signal.addEventListener('abort', resolve, { once: true }));
      reason = task.signal.reason;
      task.signal.throwIfAborted();
    },
  });
  await client.createJob(quickJob(name, { timeouts: { heartbeat: '3s', queue: '1m', cancel: '30s', run: '2m' } }));
  const { run } = await client.trigger(name);
  await until('handler started', () => started, 30_000);
  await client.cancelRun(run.id, { reason: 'test' });
  const done = await runEnds(run.id);
  assert.equal(done.run.execution_state, 'CANCELLED');
  assert.equal(reason?.kind, 'cancel_requested');
  assert.equal(done.tasks[0].state, 'CANCELLED');
  assert.equal(done.tasks[0].attempts[0].error_category, 'cancelled');
});

test('a refused claim (409, 401) ends the message without running the handler', async (t) => {
  const name = uniq('ts-refused');
  const { sqs, calls } = recordingSQS();
  let ran = 0;
  let env;
  const claims = [];
  const logger = captureLogger();
  startWorker(t, {
    [name]: (task) => {
      ran++;
      env = { run: task.run, task: task.task, attempt: task.attempt, token: task.token, pool: task.pool };
    },
  }, {
    sqs,
    logger,
    fetch: async (url, init) => {
      const resp = await fetch(url, init);
      if (String(url).endsWith('/v1/attempts/claim')) claims.push({ body: JSON.parse(init.body), status: resp.status, auth: init.headers.Authorization });
      return resp;
    },
  });
  await client.createJob(quickJob(name));
  const { run } = await client.trigger(name);
  assert.equal((await runEnds(run.id)).run.execution_state, 'SUCCEEDED');
  assert.equal(ran, 1);
  // The same envelope again (SQS delivers at least once), and one whose
  // token is not the attempt's.
  const dup = await sqs.send(new SendMessageCommand({ QueueUrl: info.queues.default, MessageBody: JSON.stringify(env) }));
  const forged = await sqs.send(new SendMessageCommand({ QueueUrl: info.queues.default, MessageBody: JSON.stringify({ ...env, token: 'not-the-token' }) }));
  const refused = await until('both claims refused and their messages deleted', () => {
    const r = logger.records.filter((x) => x.msg === 'claim refused; dropping the message' && x.run_id === run.id);
    const deleted = new Set(calls.filter((c) => c.name === 'DeleteMessageCommand').map((c) => c.input.ReceiptHandle));
    const received = calls.filter((c) => c.name === 'ReceiveMessageCommand').flatMap((c) => c.output.Messages ?? []);
    const gone = [dup.MessageId, forged.MessageId].every((id) => received.some((m) => m.MessageId === id && deleted.has(m.ReceiptHandle)));
    return r.length === 2 && gone ? r : null;
  }, 30_000);
  assert.deepEqual(new Set(refused.map((x) => x.message_id)), new Set([dup.MessageId, forged.MessageId]));
  const statuses = claims.filter((c) => c.body.run === run.id).map((c) => c.status).sort();
  assert.deepEqual(statuses, [200, 401, 409]);
  assert.equal(ran, 1, 'the handler ran only for the claim that won');
});

test('a completion refused as stale is reported, not retried', async (t) => {
  const name = uniq('ts-stale');
  const { sqs, calls } = recordingSQS();
  const logger = captureLogger();
  let attempt2Claimed;
  const claimed2 = new Promise((resolve) => (attempt2Claimed = resolve));
  const completes = [];
  let dropped = 0;
  let runId;
  startWorker(t, { [name]: () => {} }, {
    sqs,
    logger,
    // The held call must not time out into the events queue.
    completeTimeoutMs: 120_000,
    // Attempt 1's heartbeats are lost and its completion is held until
    // its retry was claimed: it arrives stale.
    fetch: async (url, init) => {
      const route = String(url).split('/v1/attempts/')[1];
      const body = init?.body ? JSON.parse(init.body) : {};
      const ours = body.run && runId && body.run === runId;
      if (ours && route === 'heartbeat' && body.attempt === 1) {
        dropped++;
        throw new TypeError('fetch failed: heartbeat lost in a partition');
      }
      if (ours && route === 'complete' && body.attempt === 1) {
        await claimed2;
        const resp = await fetch(url, init);
        completes.push({ status: resp.status, answer: await resp.clone().json() });
        return resp;
      }
      const resp = await fetch(url, init);
      if (ours && route === 'claim' && body.attempt === 2 && resp.status === 200) attempt2Claimed();
      return resp;
    },
  });
  await client.createJob(quickJob(name));
  runId = (await client.trigger(name)).run.id;
  const done = await runEnds(runId, ['SUCCEEDED', 'FAILED', 'CANCELLED'], 90_000);
  assert.equal(done.run.execution_state, 'SUCCEEDED');
  assert.equal(done.tasks[0].attempt, 2);
  await until('attempt 1 completion answered', () => completes.length === 1, 30_000);
  assert.ok(dropped > 0, 'a heartbeat was dropped');
  assert.equal(completes[0].status, 200);
  assert.equal(completes[0].answer.result, 'stale');
  await until('the stale answer logged', () => logger.records.some((r) => r.run_id === runId && r.attempt === 1 && /stale/.test(r.msg) && r.result === 'stale'), 10_000);
  assert.equal(completes.length, 1, 'the stale completion was sent once');
  const queued = calls.filter((c) => c.name === 'SendMessageCommand' && c.input.MessageBody.includes(runId));
  assert.deepEqual(queued, [], 'nothing went to the events queue');
});

/** Takes the pool queue's message for run (handing back others), or null. */
async function takeMessage(sqs, runId) {
  return until(`the envelope of ${runId} on the pool queue`, async () => {
    const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl: info.queues.default, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 30 }));
    let mine = null;
    for (const m of out.Messages ?? []) {
      if (!mine && JSON.parse(m.Body).run === runId) mine = m;
      else await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: info.queues.default, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0 }));
    }
    return mine;
  }, 30_000);
}

test('the Lambda helpers: an invoked envelope and an SQS batch', async () => {
  const name = uniq('ts-lambda');
  const { sqs } = recordingSQS();
  await client.createJob(quickJob(name));

  const invoked = handleInvoke(async (task) => task.setOutput({ via: 'invoke', attempt: task.attempt }), { logger: captureLogger() });
  const r1 = (await client.trigger(name)).run.id;
  const m1 = await takeMessage(sqs, r1);
  const answer = await invoked(JSON.parse(m1.Body), { getRemainingTimeInMillis: () => 60_000 });
  assert.equal(answer.outcome, 'succeeded');
  assert.equal(answer.result, 'applied');
  await sqs.send(new DeleteMessageCommand({ QueueUrl: info.queues.default, ReceiptHandle: m1.ReceiptHandle }));
  assert.deepEqual((await runEnds(r1)).tasks[0].output, { via: 'invoke', attempt: 1 });
  // The same envelope again: the claim is refused and the invocation succeeds without running anything.
  const again = await invoked(JSON.parse(m1.Body), { getRemainingTimeInMillis: () => 60_000 });
  assert.equal(again.claimed, false);

  const w = new Worker({ handler: (task) => task.setOutput({ via: 'sqs' }), logger: captureLogger(), sqs });
  const r2 = (await client.trigger(name)).run.id;
  const m2 = await takeMessage(sqs, r2);
  const batch = await w.handleSQS({
    Records: [
      { messageId: m2.MessageId, body: m2.Body, attributes: { ApproximateReceiveCount: '1' } },
      { messageId: 'not-an-envelope', body: '{"hello": 1}' },
    ],
  }, { getRemainingTimeInMillis: () => 60_000 });
  assert.deepEqual(batch, { batchItemFailures: [] });
  await sqs.send(new DeleteMessageCommand({ QueueUrl: info.queues.default, ReceiptHandle: m2.ReceiptHandle }));
  assert.deepEqual((await runEnds(r2)).tasks[0].output, { via: 'sqs' });
});
