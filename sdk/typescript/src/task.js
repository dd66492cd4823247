// One claimed attempt as the handler sees it, why the worker may stop it,
// and how its end becomes a completion.

import { FieldError, checkOutputRef, clipReason, encodeOutput, isCategory, refString } from './protocol.js';

/** How many heartbeat intervals a lease lasts: the heartbeat timeout. */
export const LEASE_LIFETIME = 3;
/** The most a handler whose lease was not renewed is stopped before the lease ends. */
export const MAX_FENCE_MARGIN_MS = 5000;

/**
 * Why the worker aborted a handler's signal: signal.reason is one of
 * these. kind is "cancel_requested", "run_timeout", "shutdown",
 * "lambda_deadline", "attempt_over" or "lease_lost". After "attempt_over"
 * and "lease_lost" nothing is reported for the attempt.
 */
export class AttemptStopped extends Error {
  constructor(kind, message, { category = '', outcome = 'failed', silent = false } = {}) {
    super(message);
    this.name = 'AttemptStopped';
    this.kind = kind;
    this.category = category;
    this.outcome = outcome;
    this.silent = silent;
  }
}

/** The stop causes, one object each, so that a handler may compare signal.reason with them. */
export const stopCauses = Object.freeze({
  cancelRequested: new AttemptStopped('cancel_requested', 'cancel requested', { category: 'cancelled', outcome: 'cancelled' }),
  runTimeout: new AttemptStopped('run_timeout', 'run timeout passed', { category: 'timeout' }),
  shutdown: new AttemptStopped('shutdown', 'worker shutting down', { category: 'worker_shutdown' }),
  lambdaDeadline: new AttemptStopped('lambda_deadline', 'invocation deadline near', { category: 'worker_deadline' }),
  // A heartbeat learned that the attempt is no longer current.
  attemptOver: new AttemptStopped('attempt_over', 'attempt no longer current', { silent: true }),
  // The lease could not be renewed and is about to end: the scheduler
  // resolves the attempt as lost.
  leaseLost: new AttemptStopped('lease_lost', 'attempt lease not renewed before its end', { silent: true }),
});

/**
 * A handler's error with what its completion should say: retryable
 * (default true), category (snake_case, default "error"), exitCode and
 * reason (default the message). Any thrown value works; these fields are
 * read from any error that has them.
 */
export class TaskError extends Error {
  constructor(message, { retryable, category, exitCode, reason, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'TaskError';
    if (retryable !== undefined) this.retryable = retryable;
    if (category !== undefined) this.category = category;
    if (exitCode !== undefined) this.exitCode = exitCode;
    if (reason !== undefined) this.reason = reason;
  }
}

/**
 * What the worker knows of one attempt's lease: when it ends, by the
 * earlier of the answer's lease_expires_at and the renewing call's send
 * time plus the heartbeat timeout (the second never lies late, whatever
 * the clocks say), and when the handler must therefore have stopped.
 */
export class LeaseFence {
  /** @param {number} intervalMs the heartbeat interval, a third of the heartbeat timeout */
  constructor(intervalMs, now = Date.now) {
    this.now = now;
    this.timeoutMs = LEASE_LIFETIME * intervalMs;
    this.marginMs = Math.min(MAX_FENCE_MARGIN_MS, intervalMs);
    this.leaseEnd = 0;
    this.lost = false;
    this.#wake = () => {};
  }

  #wake;

  /** Records a renewal sent at sentAt (ms) and answered with expiresAt (a Date, or null). */
  renew(sentAt, expiresAt) {
    let end = sentAt + this.timeoutMs;
    if (expiresAt && expiresAt.getTime() < end) end = expiresAt.getTime();
    this.leaseEnd = end;
    this.#wake();
  }

  /** When the handler must have stopped unless the lease is renewed first (ms). */
  deadline() {
    return this.leaseEnd - this.marginMs;
  }

  /** Resolves true once the deadline passed without a renewal, false when stop aborts. */
  async watch(stop) {
    for (;;) {
      const wait = this.deadline() - this.now();
      if (wait <= 0) return true;
      if (stop.aborted) return false;
      await new Promise((resolve) => {
        const timer = setTimeout(done, wait);
        const onAbort = () => done();
        stop.addEventListener('abort', onAbort, { once: true });
        this.#wake = done;
        function done() {
          clearTimeout(timer);
          stop.removeEventListener('abort', onAbort);
          resolve();
        }
      });
      this.#wake = () => {};
      if (stop.aborted) return false;
    }
  }
}

/**
 * The task a handler gets.
 * @param {object} env the claimed envelope (parseEnvelope)
 * @param {{signal: AbortSignal, fence: LeaseFence, workerId: string, log: object}} w
 */
export function newTask(env, w) {
  const out = { output: undefined, outputRef: '' };
  const ref = refString(env);
  const task = {
    job: env.job,
    run: env.run,
    task: env.task,
    attempt: env.attempt,
    logicalTime: env.logicalTime,
    token: env.token,
    pool: env.pool,
    workerId: w.workerId,
    payload: env.payload,
    params: env.params,
    inputs: env.inputs,
    item: env.item,
    index: env.index,
    signal: w.signal,
    log: w.log,
    get fencingDeadline() {
      return new Date(w.fence.deadline());
    },
    setOutput(value) {
      try {
        out.output = encodeOutput(value);
      } catch (err) {
        throw new FieldError(err.field, `set output of ${ref}: ${err.message}`, err.code === 'payload_too_large');
      }
    },
    setOutputRef(s) {
      checkOutputRef(s);
      out.outputRef = s;
    },
    fence() {
      return conditionCheck(env.fence, ref);
    },
  };
  return { task, out };
}

/**
 * The claim answer's fence as the ConditionCheck of a TransactWriteItems
 * in the AWS SDK's low-level shape: strings are S, numbers N.
 */
export function conditionCheck(fence, ref) {
  if (!fence) {
    throw new Error(`fence of ${ref}: the claim answer carries no fence (the ledger is not a DynamoDB table, or the scheduler predates fences); nothing can make this write exactly once`);
  }
  const key = {};
  for (const [k, v] of Object.entries(fence.key ?? {})) key[k] = { S: String(v) };
  const values = {};
  for (const [k, v] of Object.entries(fence.values ?? {})) {
    if (typeof v === 'string') values[k] = { S: v };
    else if (typeof v === 'number' && Number.isFinite(v)) values[k] = { N: String(v) };
    else throw new Error(`fence of ${ref}: value ${k} is ${JSON.stringify(v)}, neither a string nor a number`);
  }
  const check = {
    TableName: fence.table,
    Key: key,
    ConditionExpression: fence.condition,
  };
  if (fence.names && Object.keys(fence.names).length) check.ExpressionAttributeNames = { ...fence.names };
  if (Object.keys(values).length) check.ExpressionAttributeValues = values;
  return { ConditionCheck: check };
}

/**
 * Turns a handler's end into the completion's result: {report: false}
 * when nothing may be reported, else outcome, category, retryable,
 * exitCode, reason. cause is the stop cause when the worker aborted the
 * signal.
 */
export function classify(err, threw, cause) {
  if (cause?.silent) return { report: false };
  if (!threw) {
    // Work that finished is the truth, even after a cancel request or a
    // timeout: the API lets it win over CANCELLING.
    return { report: true, outcome: 'succeeded' };
  }
  const r = { report: true, outcome: 'failed', category: 'error', retryable: err?.retryable !== false };
  if (Number.isInteger(err?.exitCode)) r.exitCode = err.exitCode;
  const category = typeof err?.category === 'string' && !(err instanceof AttemptStopped) ? err.category : '';
  let reason = clipReason(typeof err?.reason === 'string' ? err.reason : errorText(err));
  if (cause) {
    const stopped = err === cause || err instanceof AttemptStopped || err?.name === 'AbortError' || err?.cause === cause;
    if (cause === stopCauses.cancelRequested && stopped) {
      return { report: true, outcome: 'cancelled', category: 'cancelled', retryable: false, exitCode: r.exitCode, reason: cause.message };
    }
    if (cause !== stopCauses.cancelRequested && (stopped || category === '')) {
      return { ...r, outcome: cause.outcome, category: cause.category, reason: clipReason(err === cause ? cause.message : `${cause.message}: ${reason}`) };
    }
  }
  if (category !== '' && isCategory(category)) r.category = category;
  r.reason = reason;
  return r;
}

function errorText(err) {
  if (err instanceof Error) return err.message || err.name;
  try {
    return typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}
