// The typed client of the API's main routes: jobs and runs
// (docs/api.md, "Jobs" and "Runs"), with the API key as bearer.

import { callApi } from './http.js';
import { lazyLocal, resolveApi } from './config.js';

const DEFAULT_TIMEOUT_MS = 30_000;

export class RunledgerClient {
  /**
   * @param {{apiUrl?: string, apiKey?: string, fetch?: typeof fetch, timeoutMs?: number, localFile?: string}} [o]
   */
  constructor(o = {}) {
    const { apiUrl, apiKey } = resolveApi(o, lazyLocal({ path: o.localFile }));
    this.apiUrl = apiUrl;
    this.#key = apiKey ?? '';
    this.#fetch = o.fetch ?? globalThis.fetch;
    this.#timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  #key;
  #fetch;
  #timeoutMs;

  #call(op, method, path, body, headers) {
    return callApi({ fetch: this.#fetch, base: this.apiUrl, op, method, path, bearer: this.#key, body, headers, timeoutMs: this.#timeoutMs });
  }

  /** POST /v1/jobs (dryRun: ?dry_run=true, nothing written): the job as stored. */
  async createJob(def, { dryRun = false } = {}) {
    const a = await this.#call('create job', 'POST', `/v1/jobs${dryRun ? '?dry_run=true' : ''}`, def);
    return a.job;
  }

  /** GET /v1/jobs/{name}. */
  async getJob(name) {
    return (await this.#call(`get job ${name}`, 'GET', `/v1/jobs/${enc(name)}`)).job;
  }

  /** GET /v1/jobs: one page, {jobs, nextToken} (nextToken null on the last page). */
  async listJobs({ limit, nextToken } = {}) {
    const a = await this.#call('list jobs', 'GET', `/v1/jobs${query({ limit, next_token: nextToken })}`);
    return { jobs: a.jobs, nextToken: a.next_token ?? null };
  }

  /** DELETE /v1/jobs/{name}; 409 conflict while the job has unfinished runs. */
  async deleteJob(name) {
    await this.#call(`delete job ${name}`, 'DELETE', `/v1/jobs/${enc(name)}`);
  }

  /**
   * POST /v1/jobs/{job}/runs: {run, tasks}. logicalTime is a Date or an
   * RFC 3339 string; the same idempotencyKey again answers the same run.
   */
  async trigger(job, { params, logicalTime, idempotencyKey } = {}) {
    const body = {};
    if (params !== undefined) body.params = params;
    if (logicalTime !== undefined) body.logical_time = logicalTime instanceof Date ? logicalTime.toISOString() : logicalTime;
    const headers = idempotencyKey === undefined ? undefined : { 'Idempotency-Key': idempotencyKey };
    return this.#call(`trigger ${job}`, 'POST', `/v1/jobs/${enc(job)}/runs`, body, headers);
  }

  /** GET /v1/runs/{run}: {run, tasks}. */
  async getRun(id) {
    return this.#call(`get run ${id}`, 'GET', `/v1/runs/${enc(id)}`);
  }

  /** POST /v1/runs/{run}/cancel: {run, tasks}; 409 illegal_transition once the run ended. */
  async cancelRun(id, { reason, operator } = {}) {
    return this.#call(`cancel run ${id}`, 'POST', `/v1/runs/${enc(id)}/cancel`, compact({ reason, operator }));
  }

  /** POST /v1/runs/{run}/tasks/{task}/cancel: {run, tasks}. */
  async cancelTask(id, task, { reason, operator } = {}) {
    return this.#call(`cancel task ${id}/${task}`, 'POST', `/v1/runs/${enc(id)}/tasks/${enc(task)}/cancel`, compact({ reason, operator }));
  }

  /** GET /v1/runs: newest first, one page, {runs, nextToken}. */
  async listRuns({ job, status, limit, nextToken } = {}) {
    const a = await this.#call('list runs', 'GET', `/v1/runs${query({ job, status, limit, next_token: nextToken })}`);
    return { runs: a.runs, nextToken: a.next_token ?? null };
  }
}

function enc(s) {
  return encodeURIComponent(String(s));
}

function query(o) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v !== undefined && v !== null) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

function compact(o) {
  const out = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out;
}
