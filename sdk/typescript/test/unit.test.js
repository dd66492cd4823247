// What the SDK decides without a stack: the wire formats it reads, the
// fence's shape, how a handler's end becomes a completion, the lease's
// fencing deadline.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { AttemptStopped, FieldError, TaskError, conditionCheck, parseDuration, parseEnvelope, stopCauses, ulid } from '../src/index.js';
import { LeaseFence, classify, newTask } from '../src/task.js';
import { clipReason, encodeOutput, MAX_REASON_BYTES } from '../src/protocol.js';

test('durations read as Go writes them', () => {
  for (const [s, ms] of [['90s', 90_000], ['1m30s', 90_000], ['250ms', 250], ['1h', 3_600_000], ['1.5s', 1500], ['0', 0], ['', 0], ['666.666666ms', 666.666666]]) {
    assert.equal(parseDuration('d', s), ms, s);
  }
  for (const s of ['10', 's', '1x', '1s2']) assert.throws(() => parseDuration('d', s), FieldError, s);
});

test('an envelope reads the contract shape and refuses what no worker can run', () => {
  const env = parseEnvelope(JSON.stringify({
    run: 'r', task: 't', attempt: 2, token: 'tok', pool: 'default', job: 'j',
    heartbeat_interval: '20s', run_timeout: '1h', logical_time: '2026-03-01T00:00:00.000Z',
    payload: { a: 1 }, params: { p: 2 }, inputs: { up: [1] }, item: 'x', index: 3, future_field: true,
  }));
  assert.equal(env.heartbeatIntervalMs, 20_000);
  assert.equal(env.runTimeoutMs, 3_600_000);
  assert.equal(env.logicalTime.toISOString(), '2026-03-01T00:00:00.000Z');
  assert.deepEqual([env.payload, env.params, env.inputs, env.item, env.index], [{ a: 1 }, { p: 2 }, { up: [1] }, 'x', 3]);
  assert.throws(() => parseEnvelope('{"run": "r", "task": "t", "attempt": 0}'), /attempt must be 1 or more/);
  assert.throws(() => parseEnvelope('{"task": "t", "attempt": 1}'), /run is required/);
  assert.throws(() => parseEnvelope('{"run": "r", "task": "t", "attempt": 1, "heartbeat_interval": "-1s"}'), /negative/);
});

test('fence() is the ConditionCheck of a TransactWriteItems: strings S, numbers N', () => {
  const fence = {
    table: 'runledger', key: { pk: 'RUN#r', sk: 'TASK#t' },
    condition: '#a = :a AND #s IN (:s0, :s1)', names: { '#a': 'attempt', '#s': 'state' },
    values: { ':a': 3, ':s0': 'RUNNING', ':s1': 'CANCELLING' },
  };
  assert.deepEqual(conditionCheck(fence, 'r/t#3'), {
    ConditionCheck: {
      TableName: 'runledger',
      Key: { pk: { S: 'RUN#r' }, sk: { S: 'TASK#t' } },
      ConditionExpression: '#a = :a AND #s IN (:s0, :s1)',
      ExpressionAttributeNames: { '#a': 'attempt', '#s': 'state' },
      ExpressionAttributeValues: { ':a': { N: '3' }, ':s0': { S: 'RUNNING' }, ':s1': { S: 'CANCELLING' } },
    },
  });
  const { task } = newTask(parseEnvelope({ run: 'r', task: 't', attempt: 1, token: 'x' }), { signal: new AbortController().signal, fence: new LeaseFence(1000), workerId: 'w@1', log: console });
  assert.throws(() => task.fence(), /carries no fence/);
  assert.throws(() => conditionCheck({ ...fence, values: { ':x': true } }, 'r/t#3'), /neither a string nor a number/);
});

test('a handler end becomes the completion the Go SDK would send', () => {
  assert.deepEqual(classify(undefined, false, null), { report: true, outcome: 'succeeded' });
  assert.deepEqual(classify(undefined, false, stopCauses.cancelRequested), { report: true, outcome: 'succeeded' }, 'finished work wins over a cancel');
  const plain = classify(new Error('boom'), true, null);
  assert.deepEqual([plain.outcome, plain.category, plain.retryable, plain.reason], ['failed', 'error', true, 'boom']);
  const typed = classify(new TaskError('no', { retryable: false, category: 'bad_input', exitCode: 2, reason: 'tail of stderr' }), true, null);
  assert.deepEqual([typed.category, typed.retryable, typed.exitCode, typed.reason], ['bad_input', false, 2, 'tail of stderr']);
  assert.equal(classify(new TaskError('x', { category: 'Not Snake' }), true, null).category, 'error');
  const cancelled = classify(stopCauses.cancelRequested, true, stopCauses.cancelRequested);
  assert.deepEqual([cancelled.outcome, cancelled.category, cancelled.retryable], ['cancelled', 'cancelled', false]);
  const abortErr = new DOMException('aborted', 'AbortError');
  assert.equal(classify(abortErr, true, stopCauses.cancelRequested).outcome, 'cancelled');
  const timedOut = classify(new Error('gave up'), true, stopCauses.runTimeout);
  assert.deepEqual([timedOut.outcome, timedOut.category, timedOut.reason], ['failed', 'timeout', 'run timeout passed: gave up']);
  assert.equal(classify(new TaskError('mine', { category: 'own' }), true, stopCauses.shutdown).category, 'own');
  assert.deepEqual(classify(undefined, false, stopCauses.leaseLost), { report: false }, 'nothing is reported once the lease was lost');
  assert.deepEqual(classify(new Error('x'), true, stopCauses.attemptOver), { report: false });
  assert.ok(stopCauses.leaseLost instanceof AttemptStopped);
});

test('outputs and reasons keep to the contract limits', () => {
  assert.equal(encodeOutput({ a: 1 }), '{"a":1}');
  assert.equal(encodeOutput(undefined), undefined);
  assert.throws(() => encodeOutput('x'.repeat(16 * 1024)), (err) => err.code === 'payload_too_large');
  const long = 'é'.repeat(3000);
  const clipped = clipReason(long);
  assert.ok(Buffer.byteLength(clipped) <= MAX_REASON_BYTES);
  assert.ok(long.endsWith(clipped));
  assert.ok(!clipped.includes('\uFFFD'));
});

test('the fencing deadline: the earlier lease estimate less min(5 s, a beat)', () => {
  let now = 1_000_000;
  const f = new LeaseFence(2000, () => now);
  f.renew(now, new Date(now + 60_000));
  assert.equal(f.deadline(), now + 6000 - 2000, 'sent + 3 beats wins over a later answer');
  f.renew(now, new Date(now + 3000));
  assert.equal(f.deadline(), now + 3000 - 2000, 'an earlier answer wins');
  const g = new LeaseFence(30_000, () => now);
  g.renew(now, null);
  assert.equal(g.deadline(), now + 90_000 - 5000, 'the margin is at most 5 s');
});

test('event ids are ULIDs, unique and ordered by time', () => {
  const a = ulid(1000);
  const b = ulid(2000);
  assert.match(a, /^[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.ok(a < b);
  assert.notEqual(ulid(5), ulid(5));
});
