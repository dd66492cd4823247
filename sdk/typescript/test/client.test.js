// The client of the main routes against the local stack: what it answers,
// and the API's refusals as RunledgerErrors.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { RunledgerClient, RunledgerError } from '../src/index.js';
import { client, info, quickJob, uniq } from './helpers.js';

/** Asserts that p rejects with a RunledgerError of status and code. */
async function refuses(p, status, code) {
  await assert.rejects(p, (err) => {
    assert.ok(err instanceof RunledgerError, `want a RunledgerError, got ${err}`);
    assert.equal(err.status, status);
    assert.equal(err.code, code);
    assert.ok(err.detail.length > 0, 'the API said why');
    return true;
  });
}

test('jobs: create, get, list, delete; runs: trigger (idempotent), get, list, cancel', async () => {
  const name = uniq('ts-client');
  const job = await client.createJob(quickJob(name, { pool: 'demo' }));
  assert.equal(job.name, name);
  assert.equal(job.version, 1);
  assert.equal((await client.getJob(name)).name, name);
  const dry = await client.createJob(quickJob(name), { dryRun: true });
  assert.equal(dry.name, name, 'a dry run answers the definition although the name is taken');

  let found = false;
  for (let token; !found; ) {
    const page = await client.listJobs({ limit: 500, nextToken: token });
    found = page.jobs.some((j) => j.name === name);
    if (!page.nextToken) break;
    token = page.nextToken;
  }
  assert.ok(found, 'the job is listed');

  const first = await client.trigger(name, { params: { day: '2026-03-01' }, idempotencyKey: 'k1', logicalTime: new Date('2026-03-01T00:00:00Z') });
  const again = await client.trigger(name, { params: { day: '2026-03-01' }, idempotencyKey: 'k1', logicalTime: new Date('2026-03-01T00:00:00Z') });
  assert.equal(again.run.id, first.run.id, 'the same idempotency key answers the same run');
  assert.deepEqual(first.run.params, { day: '2026-03-01' });
  assert.equal(first.run.logical_time, '2026-03-01T00:00:00.000Z');

  const read = await client.getRun(first.run.id);
  assert.equal(read.run.job, name);
  assert.equal(read.tasks[0].task, 'main');
  const { runs } = await client.listRuns({ job: name });
  assert.deepEqual(runs.map((r) => r.id), [first.run.id]);

  await refuses(client.deleteJob(name), 409, 'conflict').catch(async (err) => {
    // The demo pool's worker may have finished the run already.
    if ((await client.getRun(first.run.id)).run.status === 'RUNNING') throw err;
  });
});

test('the API refusals arrive as RunledgerErrors with status and code', async () => {
  await refuses(client.getRun('01JNOSUCHRUN0000000000000'), 404, 'not_found');
  await refuses(client.getJob(uniq('ts-missing')), 404, 'not_found');
  await refuses(client.createJob({ name: uniq('ts-bad'), schedule: { cron: 'every day' } }), 422, 'invalid_cron');
  await refuses(client.createJob({ name: uniq('ts-bad'), no_such_field: 1 }), 422, 'invalid_field');
  const name = uniq('ts-twice');
  await client.createJob(quickJob(name));
  await refuses(client.createJob(quickJob(name)), 409, 'conflict');
  const { run } = await client.trigger(name);
  await client.cancelRun(run.id);
  await refuses(client.cancelRun(run.id), 409, 'illegal_transition');
  await client.deleteJob(name);
  await refuses(client.getJob(name), 404, 'not_found');
  const wrongKey = new RunledgerClient({ apiUrl: info.api_url, apiKey: 'not-the-key' });
  await refuses(wrongKey.listJobs(), 401, 'unauthorized');
  const nowhere = new RunledgerClient({ apiUrl: 'http://127.0.0.1:9', apiKey: 'x', timeoutMs: 2000 });
  await assert.rejects(nowhere.listJobs(), (err) => err instanceof RunledgerError && err.status === 0 && err.code === 'unreachable' && err.transient);
  assert.throws(() => new RunledgerClient({ apiUrl: 'ftp://example' }), /want http\(s\):\/\/host/);
});
