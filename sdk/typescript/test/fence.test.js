// The fenced commit on the stack's DynamoDB: a worker's own
// TransactWriteItems with task.fence() lands only while its attempt owns
// the task. A worker partitioned past its lease (its heartbeats dropped)
// tries its commit after the retry started and is refused; the retry's
// lands; rounds with random partitions leave exactly one row each.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CreateTableCommand, DeleteTableCommand, DynamoDBClient, QueryCommand, TransactWriteItemsCommand } from '@aws-sdk/client-dynamodb';

import { client, info, quickJob, runEnds, startWorker, uniq, until } from './helpers.js';

const ddb = new DynamoDBClient({ endpoint: info.dynamodb_endpoint, region: info.region ?? 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });

/** A user's own table, made for the test and dropped after it. */
async function userTable(t) {
  const name = uniq('ts_fence_rows');
  await ddb.send(new CreateTableCommand({
    TableName: name,
    KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }, { AttributeName: 'sk', KeyType: 'RANGE' }],
    AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }, { AttributeName: 'sk', AttributeType: 'S' }],
    BillingMode: 'PAY_PER_REQUEST',
  }));
  t.after(() => ddb.send(new DeleteTableCommand({ TableName: name })));
  return name;
}

/**
 * The user's commit, as docs/workers.md shows it: the fence, a marker that
 * the task's effect happened (once per task, whichever attempt), and the
 * effect itself, here one row per attempt so that the test can count the
 * transactions that landed. The fence refuses an attempt that no longer
 * owns its task; the marker refuses a retry of an attempt whose commit
 * landed but whose success never reached the scheduler.
 */
function commit(table, task) {
  return ddb.send(new TransactWriteItemsCommand({
    TransactItems: [
      task.fence(),
      { Put: { TableName: table, Item: { pk: { S: task.run }, sk: { S: `done#${task.task}` }, attempt: { N: String(task.attempt) } }, ConditionExpression: 'attribute_not_exists(pk)' } },
      { Put: { TableName: table, Item: { pk: { S: task.run }, sk: { S: `row#${task.attempt}` }, attempt: { N: String(task.attempt) } } } },
    ],
  }));
}

/** Whether err is the transaction refused by its first item, the fence. */
function fencedOff(err) {
  return err?.name === 'TransactionCanceledException' && err.CancellationReasons?.[0]?.Code === 'ConditionalCheckFailed';
}

/** Whether err is the transaction refused only because the task's effect is already there. */
function alreadyDone(err) {
  return err?.name === 'TransactionCanceledException' && err.CancellationReasons?.[0]?.Code !== 'ConditionalCheckFailed' &&
    err.CancellationReasons?.[1]?.Code === 'ConditionalCheckFailed';
}

/** The attempts whose effect row landed for run. */
async function rows(table, run) {
  const out = await ddb.send(new QueryCommand({
    TableName: table, KeyConditionExpression: 'pk = :r AND begins_with(sk, :row)',
    ExpressionAttributeValues: { ':r': { S: run }, ':row': { S: 'row#' } }, ConsistentRead: true,
  }));
  return (out.Items ?? []).map((i) => Number(i.attempt.N));
}

/** The attempt the task's once-marker names. */
async function marker(table, task) {
  const out = await ddb.send(new QueryCommand({
    TableName: table, KeyConditionExpression: 'pk = :r AND sk = :d',
    ExpressionAttributeValues: { ':r': { S: task.run }, ':d': { S: `done#${task.task}` } }, ConsistentRead: true,
  }));
  return Number(out.Items[0].attempt.N);
}

/** Repeats fn through transient failures (a loaded machine's slow answers) for a minute. */
async function retried(fn) {
  const end = Date.now() + 60_000;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!err.transient || Date.now() > end) throw err;
    }
  }
}

/**
 * Waits until this worker started a later attempt of task's instance than
 * task's (the only worker on the pool, it runs every retry): its handler
 * runs only once the claim made that attempt the task's current one.
 */
function retryStarted(task, s) {
  return until(`a retry of ${task.run} after attempt ${task.attempt}`, () => s.attempts.some((n) => n > task.attempt), 180_000);
}

/**
 * A worker whose transport drops the heartbeats of the attempts named in
 * cut (a partition between it and the API), and whose handler is fenced.
 */
function fencedWorker(t, job, table, plan, concurrency) {
  const cut = new Set();
  const seen = new Map(); // run -> {attempts, refused, landed, abortKind, aborted}
  const handler = async (task) => {
    const s = seen.get(task.run) ?? { attempts: [], refused: [], landed: [], done: [] };
    seen.set(task.run, s);
    s.attempts.push(task.attempt);
    const p = plan(task);
    if (p.partition) {
      await new Promise((r) => setTimeout(r, p.delayMs));
      cut.add(`${task.run}#${task.attempt}`);
    }
    if (p.partition || task.signal.aborted) {
      // The work goes on, blind to its signal, past its lease; it tries to
      // commit only once its retry has started.
      let finish;
      s.done.push(new Promise((r) => (finish = r)));
      try {
        await retryStarted(task, s);
        s.abortKind = task.signal.reason?.kind;
        await commit(table, task);
        s.landed.push(task.attempt);
      } catch (err) {
        if (!fencedOff(err)) {
          s.errors = [...(s.errors ?? []), `attempt ${task.attempt}: ${err.name}: ${err.message}`];
          throw err;
        }
        s.refused.push(task.attempt);
      } finally {
        finish();
      }
      return;
    }
    try {
      await commit(table, task);
      s.landed.push(task.attempt);
      task.setOutput({ committed: task.attempt });
    } catch (err) {
      if (!alreadyDone(err)) {
        s.errors = [...(s.errors ?? []), `attempt ${task.attempt}: ${err.name}: ${err.message}`];
        throw err;
      }
      // An earlier attempt's commit landed but its success was never
      // reported (its lease ran out as it committed): the effect is done.
      task.setOutput({ committed: await marker(table, task) });
    }
  };
  const { worker } = startWorker(t, { [job]: handler }, {
    concurrency,
    fetch: async (url, init) => {
      if (String(url).endsWith('/v1/attempts/heartbeat')) {
        const b = JSON.parse(init.body);
        if (cut.has(`${b.run}#${b.attempt}`)) throw new TypeError('fetch failed: heartbeat lost in a partition');
      }
      return fetch(url, init);
    },
  });
  return { worker, seen };
}

test('a worker partitioned past its lease is refused its commit; the retry commits', async (t) => {
  const table = await userTable(t);
  const job = uniq('ts-fence');
  const { seen } = fencedWorker(t, job, table, (task) => ({ partition: task.attempt === 1, delayMs: 0 }), 4);
  await client.createJob(quickJob(job, { retry: { max_attempts: 3, initial_interval: '200ms', jitter: 'none' } }));
  const { run } = await client.trigger(job);
  const done = await runEnds(run.id, ['SUCCEEDED', 'FAILED', 'CANCELLED'], 90_000);
  const s = seen.get(run.id);
  await Promise.all(s.done);
  assert.equal(done.run.execution_state, 'SUCCEEDED');
  assert.deepEqual(s.refused, [1], "attempt 1's commit was refused by the fence");
  assert.equal(s.abortKind, 'lease_lost', "attempt 1's signal was aborted for its lost lease before its retry started");
  assert.deepEqual(s.landed, [2], "the retry's commit landed");
  assert.deepEqual(await rows(table, run.id), [2]);
  assert.deepEqual(done.tasks[0].output, { committed: 2 });
  assert.notEqual(done.tasks[0].attempts[0].state, 'SUCCEEDED', 'nothing was reported for attempt 1');
});

test('100 rounds with random partitions leave exactly one output row per round', async (t) => {
  const ROUNDS = 100;
  const AT_ONCE = 50;
  const table = await userTable(t);
  const job = uniq('ts-fence-rounds');
  const plans = new Map();
  const { seen } = fencedWorker(t, job, table, (task) => (task.attempt === 1 ? task.params : { partition: false }), 2 * AT_ONCE + 8);
  // A longer lease than the quick jobs': on a loaded machine (a heartbeat
  // answered in seconds) an unpartitioned attempt must not lose its lease
  // by slowness alone.
  await client.createJob(quickJob(job, {
    retry: { max_attempts: 4, initial_interval: '200ms', jitter: 'none' },
    timeouts: { heartbeat: '15s', queue: '3m', cancel: '5s', run: '5m' },
  }));
  const started = Date.now();
  let partitioned = 0;
  for (let base = 0; base < ROUNDS; base += AT_ONCE) {
    const ids = [];
    // Triggered ten at a time; each round's plan travels in its params.
    for (let i = base; i < Math.min(base + AT_ONCE, ROUNDS); i += 10) {
      const batch = Array.from({ length: Math.min(10, base + AT_ONCE - i, ROUNDS - i) }, (_, k) => i + k);
      const runs = await Promise.all(batch.map(async (round) => {
        const plan = { round, partition: Math.random() < 0.5, delayMs: Math.floor(Math.random() * 3000) };
        if (plan.partition) partitioned++;
        // The idempotency key makes a trigger repeated after a lost answer the same run.
        const { run } = await retried(() => client.trigger(job, { params: plan, idempotencyKey: `${job}-${round}` }));
        plans.set(run.id, plan);
        return run.id;
      }));
      ids.push(...runs);
    }
    await Promise.all(ids.map(async (id) => {
      const done = await runEnds(id, ['SUCCEEDED', 'FAILED', 'CANCELLED'], 300_000, 1000);
      const s = seen.get(id);
      await Promise.all(s.done);
      const got = await rows(table, id);
      const attempts = JSON.stringify(done.tasks[0].attempts.map((a) => [a.n, a.state, a.error_category]));
      const history = done.run.execution_state === 'SUCCEEDED' ? '' : JSON.stringify(await client.getRun(id).then((r) => r.tasks[0]));
      assert.equal(done.run.execution_state, 'SUCCEEDED', `round ${id}: attempts ${attempts}, handler saw ${JSON.stringify(s)} ${history}`);
      assert.equal(got.length, 1, `round ${id}: rows of attempts ${got}, handler saw ${JSON.stringify(s)}`);
      assert.deepEqual(done.tasks[0].output, { committed: got[0] });
      if (plans.get(id).partition) assert.ok(s.refused.includes(1), `round ${id}: the partitioned attempt's commit was refused; handler saw ${JSON.stringify(s)}, attempts ${JSON.stringify(done.tasks[0].attempts.map((a) => [a.n, a.state, a.error_category]))}`);
    }));
  }
  t.diagnostic(`${ROUNDS} rounds (${partitioned} partitioned), ${AT_ONCE} at once, in ${((Date.now() - started) / 1000).toFixed(1)} s`);
});
