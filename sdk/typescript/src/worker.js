// The worker: it takes attempt envelopes from a pool's queue, claims each
// attempt (with the envelope's token as bearer), runs the handler while it
// heartbeats and keeps the message hidden, and reports the outcome through
// the API's complete route, or durably on the events queue when the route
// is unreachable, before it lets the message go. The same processing runs
// as a long-running process (run) and as a Lambda SQS handler (handleSQS).
//
// Timeouts, each bounding one thing:
//   - the envelope's run_timeout bounds one attempt from claim to
//     completion: the signal aborts (run_timeout) and the attempt is
//     reported failed with category "timeout";
//   - the envelope's heartbeat_interval is the beat; the lease ends a
//     heartbeat timeout (three beats) after the last renewal;
//   - when the lease could not be renewed, the signal aborts (lease_lost)
//     min(5 s, heartbeat timeout / 3) before it ends, and nothing is
//     reported, so the handler never runs beside a retry;
//   - visibilityTimeoutMs hides a received message, extended every third
//     of it while the attempt runs;
//   - shutdownGraceMs bounds how long running handlers may finish after
//     stop(); stopTimeoutMs how long a handler whose signal the worker
//     aborted may take to return before it is reported without it.

import { hostname } from 'node:os';
import {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';

import { AttemptRoutes, isRefusal } from './attempts.js';
import { lazyLocal, resolveApi } from './config.js';
import { isTransient } from './http.js';
import { errText, jsonLogger, withFields } from './log.js';
import { parseEnvelope, parseTime, refString, ulid } from './protocol.js';
import { LeaseFence, classify, newTask, stopCauses } from './task.js';

/** Defaults of the worker's options, in milliseconds where a time. */
export const defaults = Object.freeze({
  concurrency: 1,
  visibilityTimeoutMs: 30_000,
  pollWaitMs: 20_000,
  shutdownGraceMs: 30_000,
  stopTimeoutMs: 5_000,
  deadlineReserveMs: 5_000,
  defaultHeartbeatIntervalMs: 10_000,
  completeTimeoutMs: 10_000,
  claimTimeoutMs: 60_000,
  reportTimeoutMs: 60_000,
});

/** How many times one delivery claims through transient failures before leaving the message for redelivery. */
const CLAIM_TRIES = 3;

export class Worker {
  /**
   * @param {import('./index.js').WorkerOptions} o
   */
  constructor(o) {
    if (typeof o?.handler !== 'function') throw new Error('new worker: handler is not a function');
    const local = lazyLocal({ path: o.localFile });
    const { apiUrl } = resolveApi(o, local);
    this.apiUrl = apiUrl;
    this.handler = o.handler;
    this.pool = o.pool ?? 'default';
    const name = o.name ?? hostname() ?? 'worker';
    if (name.includes('@')) throw new Error(`new worker: name ${JSON.stringify(name)} contains @`);
    this.bootId = ulid();
    /** The worker id claims carry: "<name>@<boot id>". */
    this.id = `${name}@${this.bootId}`;
    this.opts = { ...defaults };
    for (const k of Object.keys(defaults)) {
      if (o[k] === undefined) continue;
      if (typeof o[k] !== 'number' || !(o[k] >= 0)) throw new Error(`new worker: ${k} ${o[k]}, want a number >= 0`);
      this.opts[k] = o[k];
    }
    if (!Number.isInteger(this.opts.concurrency) || this.opts.concurrency < 1) {
      throw new Error(`new worker: concurrency ${this.opts.concurrency}, want an integer >= 1`);
    }
    if (this.opts.visibilityTimeoutMs < 1000 || this.opts.visibilityTimeoutMs > 12 * 3600_000) {
      throw new Error(`new worker: visibilityTimeoutMs ${this.opts.visibilityTimeoutMs}, want 1 s to 12 h`);
    }
    if (this.opts.pollWaitMs > 20_000) throw new Error(`new worker: pollWaitMs ${this.opts.pollWaitMs}, want at most 20 s`);
    this.queueCompletions = o.queueCompletions === true;
    this.fetch = o.fetch ?? globalThis.fetch;
    this.routes = new AttemptRoutes(apiUrl, (...a) => this.fetch(...a));
    this.log = withFields(o.logger ?? jsonLogger(), { worker_id: this.id });
    // The queues and the SQS client are needed only by run() and the
    // events-queue fallback; the Lambda executor's handler has neither.
    this.#queues = () => {
      const info = o.queueUrl && o.eventsQueueUrl ? null : local();
      const fromFile = !o.queueUrl && info?.queues?.[this.pool];
      return {
        queueUrl: o.queueUrl ?? process.env.RUNLEDGER_QUEUE_URL ?? info?.queues?.[this.pool],
        eventsQueueUrl: o.eventsQueueUrl ?? process.env.RUNLEDGER_EVENTS_QUEUE_URL ?? info?.queues?.events,
        local: fromFile || (!o.eventsQueueUrl && !process.env.RUNLEDGER_EVENTS_QUEUE_URL && info) ? info : null,
      };
    };
    this.#sqsOption = o.sqs;
  }

  #queues;
  #sqsOption;
  #sqs;
  #q;
  #stop;
  #shutdown;
  #running;

  /** The queue URLs and the SQS client, resolved once. */
  #queue() {
    if (!this.#q) {
      const q = this.#queues();
      let sqs = this.#sqsOption;
      if (!sqs) {
        // Locally the emulator's endpoint and any credentials; deployed,
        // the AWS SDK's defaults.
        sqs = q.local?.sqs_endpoint
          ? new SQSClient({ endpoint: q.local.sqs_endpoint, region: q.local.region ?? 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } })
          : new SQSClient({});
      }
      this.#q = { ...q, sqs };
    }
    return this.#q;
  }

  /**
   * Receives envelopes from the pool's queue and processes up to
   * concurrency of them at once until stop(). Then it stops receiving,
   * lets running handlers finish for up to shutdownGraceMs, aborts the
   * signals of those still running (shutdown), waits for their reports
   * and resolves. It rejects at once when the pool's queue does not exist.
   */
  run() {
    if (this.#running) return Promise.reject(new Error('run worker: already running'));
    const { queueUrl } = this.#queue();
    if (!queueUrl) {
      return Promise.reject(new Error(`run worker: no queue URL for pool ${this.pool}: pass queueUrl, set RUNLEDGER_QUEUE_URL, or start the local stack`));
    }
    this.#stop = new AbortController();
    this.#shutdown = new AbortController();
    this.#running = this.#run().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  /** Asks run() to stop and resolves when it has (a no-op when not running). */
  async stop() {
    this.#stop?.abort();
    await this.#running;
  }

  async #run() {
    const { queueUrl, sqs } = this.#queue();
    const stop = this.#stop.signal;
    const mode = newMode(this.#shutdown.signal, this.opts.stopTimeoutMs, true);
    const inflight = new Set();
    const stopped = aborted(stop);
    const bo = backoff(200, 30_000);
    this.log.info('worker started', { pool: this.pool, concurrency: this.opts.concurrency });
    let runErr;
    while (!stop.aborted) {
      while (inflight.size >= this.opts.concurrency && !stop.aborted) await Promise.race([...inflight, stopped]);
      if (stop.aborted) break;
      let msgs;
      try {
        // Not aborted by stop (the long poll bounds it): an aborted long
        // poll may still take messages, which would then stay hidden for
        // the whole visibility timeout. What arrives after the stop is
        // handed back at once instead.
        const out = await sqs.send(new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: Math.min(this.opts.concurrency - inflight.size, 10),
          WaitTimeSeconds: Math.round(this.opts.pollWaitMs / 1000),
          VisibilityTimeout: Math.ceil(this.opts.visibilityTimeoutMs / 1000),
          MessageSystemAttributeNames: ['ApproximateReceiveCount'],
        }));
        msgs = out.Messages ?? [];
      } catch (err) {
        if (err?.name === 'QueueDoesNotExist' || err?.name === 'AWS.SimpleQueueService.NonExistentQueue') {
          this.log.error('pool queue missing; stopping', { err: errText(err) });
          runErr = new Error(`run worker ${this.id}: pool queue ${queueUrl} does not exist`, { cause: err });
          break;
        }
        const wait = bo.next();
        this.log.warn('receive failed; backing off', { err: errText(err), backoff_ms: wait });
        await sleep(wait, stop);
        continue;
      }
      bo.reset();
      if (stop.aborted) {
        await Promise.all(msgs.map((m) => this.#handBack(m)));
        break;
      }
      for (const m of msgs) {
        const d = { messageId: m.MessageId, receipt: m.ReceiptHandle, body: m.Body ?? '', receiveCount: Number(m.Attributes?.ApproximateReceiveCount ?? 0) };
        const p = this.#process(d, mode)
          .catch((err) => this.log.error('processing a message failed', { message_id: d.messageId, err: errText(err) }))
          .finally(() => inflight.delete(p));
        inflight.add(p);
      }
    }
    await this.#drain(inflight);
    this.log.info('worker stopped');
    if (runErr) throw runErr;
  }

  /** The graceful shutdown: the grace period, then abort the handlers (shutdown) and wait for their reports. */
  async #drain(inflight) {
    if (inflight.size === 0) return;
    this.log.info('worker stopping; waiting for running attempts', { running: inflight.size, grace_ms: this.opts.shutdownGraceMs });
    const all = Promise.allSettled([...inflight]);
    const grace = new AbortController();
    const done = await Promise.race([all.then(() => true), sleep(this.opts.shutdownGraceMs, grace.signal).then(() => false)]);
    grace.abort();
    if (!done) {
      this.log.warn('shutdown grace period over; aborting running handlers', { running: inflight.size });
      this.#shutdown.abort(stopCauses.shutdown);
      await all;
    }
  }

  async #handBack(m) {
    try {
      await this.#queue().sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: this.#queue().queueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0 }));
    } catch (err) {
      this.log.warn('hand back message on stop', { message_id: m.MessageId, err: errText(err) });
    }
  }

  /**
   * The Lambda handler for a pool's queue (an SQS event source mapping
   * with ReportBatchItemFailures): each record is claimed, run and
   * reported, up to concurrency at once. A record is answered as a batch
   * item failure only when worth delivering again: a claim that failed
   * transiently, a report that could not be sent, or too little time left
   * to start. Handlers' signals abort deadlineReserveMs before the
   * invocation's deadline (lambda_deadline, reported failed, retried).
   */
  async handleSQS(event, context) {
    const remaining = context?.getRemainingTimeInMillis?.();
    const mode = newMode(new AbortController().signal, this.opts.stopTimeoutMs, false);
    if (typeof remaining === 'number') {
      mode.handlerDeadline = Date.now() + remaining - this.opts.deadlineReserveMs;
      mode.stopWaitMs = Math.min(mode.stopWaitMs, this.opts.deadlineReserveMs / 2);
    }
    const records = event?.Records ?? [];
    const results = new Array(records.length);
    let next = 0;
    const lane = async () => {
      while (next < records.length) {
        const i = next++;
        const r = records[i];
        const d = { messageId: r.messageId, receipt: '', body: r.body ?? '', receiveCount: Number(r.attributes?.ApproximateReceiveCount ?? 0) };
        results[i] = await this.#process(d, mode).catch((err) => {
          this.log.error('processing a record failed', { message_id: d.messageId, err: errText(err) });
          return 'retry';
        });
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.opts.concurrency, records.length) }, lane));
    return { batchItemFailures: records.filter((_, i) => results[i] === 'retry').map((r) => ({ itemIdentifier: r.messageId })) };
  }

  /** Takes one delivery through claim, run and report; answers "done" (the message may go) or "retry". */
  async #process(d, mode) {
    let log = withFields(this.log, { message_id: d.messageId, receive_count: d.receiveCount });
    let env;
    try {
      env = parseEnvelope(d.body);
      if (!env.token) throw new Error('token is required');
    } catch (err) {
      // No worker can ever run it; the scheduler's queue timeout takes
      // care of the attempt, if there is one.
      log.error('dropping a message that is not an envelope', { err: errText(err) });
      await this.#deleteMessage(d, log);
      return 'done';
    }
    log = withFields(log, { run_id: env.run, task_id: env.task, attempt: env.attempt });
    if (mode.handlerDeadline && Date.now() >= mode.handlerDeadline) {
      log.warn('too close to the invocation deadline to start; leaving the message');
      return 'retry';
    }
    const claimSent = Date.now();
    let claimed;
    try {
      claimed = await this.#claim(env, CLAIM_TRIES, 1000);
    } catch (err) {
      if (isRefusal(err)) {
        // Exactly one claim wins; this delivery is a duplicate, or the
        // attempt is no longer wanted.
        log.info('claim refused; dropping the message', { err: errText(err) });
        await this.#deleteMessage(d, log);
        return 'done';
      }
      // A transient failure, or an answer outside the contract (a wrong
      // API URL, a proxy): dropping would lose the attempt.
      log[isTransient(err) ? 'warn' : 'error']('claim failed; leaving the message for redelivery', { err: errText(err) });
      return 'retry';
    }
    let run;
    try {
      run = claimedEnvelope(env, claimed);
    } catch (err) {
      // Claimed, but what to run is unknown: the lease runs out and the
      // scheduler retries the attempt; a redelivery would be refused.
      log.error('claim answer unusable; running nothing', { err: errText(err) });
      await this.#deleteMessage(d, log);
      return 'done';
    }
    log.info('attempt claimed');
    // Heartbeats and the message's visibility last until the report is out.
    const keep = new AbortController();
    const loops = [];
    if (mode.ownsMessage) loops.push(this.#keepHidden(keep.signal, d, log));
    try {
      const comp = await this.#runClaimed(keep.signal, loops, run, claimSent, parseTime('lease_expires_at', claimed.lease_expires_at), mode, log);
      if (!comp) {
        keep.abort();
        await this.#deleteMessage(d, log);
        return 'done';
      }
      try {
        await this.#report(comp, log);
      } catch (err) {
        log.error('completion not reported; leaving the message', { err: errText(err), event_id: comp.event_id });
        return 'retry';
      }
      // Only now may the message go: the API has the report, or it is
      // durable on the events queue.
      keep.abort();
      await Promise.all(loops);
      await this.#deleteMessage(d, log);
      return 'done';
    } finally {
      keep.abort();
      await Promise.all(loops);
    }
  }

  /**
   * Claims the attempt, repeating through transient failures with the same
   * event id (a claim that won but lost its answer wins again), tries
   * times at most, or until giveUpAt (ms) when tries is Infinity.
   */
  async #claim(env, tries, maxBackoffMs, giveUpAt = Infinity) {
    const body = { run: env.run, task: env.task, attempt: env.attempt, worker_id: this.id, event_id: ulid() };
    const bo = backoff(100, maxBackoffMs);
    for (let t = 1; ; t++) {
      try {
        return await this.routes.claim(env.token, body, { timeoutMs: 30_000 });
      } catch (err) {
        const wait = bo.next();
        if (!isTransient(err) || t >= tries || Date.now() + wait >= giveUpAt) throw err;
        await sleep(wait);
      }
    }
  }

  /**
   * Runs the handler on a claimed attempt, heartbeating (loops, until keep
   * aborts), and returns the completion to report, or null when nothing
   * may be reported.
   */
  async #runClaimed(keep, loops, env, claimSent, leaseEnd, mode, log) {
    const hctl = new AbortController();
    let cause = null;
    const stopHandler = (c) => {
      if (hctl.signal.aborted) return;
      cause = c;
      hctl.abort(c);
    };
    const timers = [];
    if (env.runTimeoutMs > 0) timers.push(setTimeout(() => stopHandler(stopCauses.runTimeout), env.runTimeoutMs));
    if (mode.handlerDeadline) timers.push(setTimeout(() => stopHandler(stopCauses.lambdaDeadline), Math.max(0, mode.handlerDeadline - Date.now())));
    const onShutdown = () => stopHandler(stopCauses.shutdown);
    mode.shutdown.addEventListener('abort', onShutdown, { once: true });
    if (mode.shutdown.aborted) onShutdown();

    const interval = env.heartbeatIntervalMs > 0 ? env.heartbeatIntervalMs : this.opts.defaultHeartbeatIntervalMs;
    const fence = new LeaseFence(interval);
    fence.renew(claimSent, leaseEnd);
    let handlerDone = false;
    const done = () => handlerDone;
    loops.push(this.#heartbeatLoop(keep, env, interval, fence, stopHandler, done, log));
    loops.push(this.#fenceLoop(keep, fence, stopHandler, done, log));

    const { task, out } = newTask(env, { signal: hctl.signal, fence, workerId: this.id, log });
    const started = Date.now();
    let r;
    try {
      r = await this.#runHandler(task, hctl.signal, () => cause, mode);
    } finally {
      handlerDone = true;
      for (const t of timers) clearTimeout(t);
      mode.shutdown.removeEventListener('abort', onShutdown);
    }
    const endedAt = new Date();
    let res;
    if (r.returned) {
      res = classify(r.err, r.threw, cause);
    } else {
      log.error(r.abandonedBy.silent ? 'handler did not return after its signal aborted; going on without it' : 'handler did not return after its signal aborted; reporting without it',
        { reason: r.abandonedBy.message, stop_wait_ms: mode.stopWaitMs });
      res = r.abandonedBy.silent
        ? { report: false }
        : { report: true, outcome: r.abandonedBy.outcome, category: r.abandonedBy.category, retryable: true, reason: r.abandonedBy.message };
    }
    if (!res.report) {
      // A newer attempt or the instance's state superseded this one, or
      // its lease ran out: whatever it did is no longer the attempt's
      // truth. (The lease's end was logged when it came.)
      if (cause !== stopCauses.leaseLost) log.warn('attempt superseded; not reporting it', { handler_err: r.threw ? errText(r.err) : '' });
      return null;
    }
    const comp = { run: env.run, task: env.task, attempt: env.attempt, event_id: ulid(), outcome: res.outcome, event_time: endedAt.toISOString(), token: env.token };
    if (res.exitCode !== undefined) comp.exit_code = res.exitCode;
    if (out.outputRef) comp.output_ref = out.outputRef;
    if (res.outcome === 'succeeded') {
      if (out.output !== undefined) comp.output = JSON.parse(out.output);
    } else {
      comp.error_category = res.category;
      comp.retryable = res.retryable;
      if (res.reason) comp.reason = res.reason;
    }
    log.info('attempt finished', { outcome: comp.outcome, error_category: comp.error_category, run_ms: Date.now() - started, event_id: comp.event_id });
    return comp;
  }

  /**
   * Calls the handler and waits for it. Once its signal aborted, it waits
   * stopWaitMs more, then goes on without it; after a cancel request it
   * waits as long as the handler cleans up, unless a shutdown or the
   * invocation deadline comes first.
   */
  async #runHandler(task, signal, causeOf, mode) {
    const p = (async () => this.handler(task))().then(
      () => ({ returned: true, threw: false }),
      (err) => ({ returned: true, threw: true, err }),
    );
    const first = await Promise.race([p, aborted(signal)]);
    if (first?.returned) return first;
    let c = causeOf() ?? stopCauses.shutdown;
    if (c === stopCauses.cancelRequested) {
      const limit = new AbortController();
      const waits = [p, mode.shutdownDone.then(() => stopCauses.shutdown)];
      if (mode.handlerDeadline) waits.push(sleep(Math.max(0, mode.handlerDeadline - Date.now()), limit.signal).then(() => stopCauses.lambdaDeadline));
      const r = await Promise.race(waits);
      limit.abort();
      if (r?.returned) return r;
      c = r;
    }
    const limit = new AbortController();
    const r = await Promise.race([p, sleep(mode.stopWaitMs, limit.signal).then(() => null)]);
    limit.abort();
    return r ?? { returned: false, abandonedBy: c };
  }

  /**
   * Aborts the handler (lease_lost) when the lease was not renewed and
   * its fencing deadline passed, unless the handler returned already.
   */
  async #fenceLoop(keep, fence, stopHandler, handlerDone, log) {
    if (!(await fence.watch(keep)) || handlerDone()) return;
    fence.lost = true;
    log.warn('attempt lease not renewed; aborting the handler before the lease ends, reporting nothing',
      { lease_expires_at: new Date(fence.leaseEnd).toISOString(), fencing_deadline: new Date(fence.deadline()).toISOString() });
    stopHandler(stopCauses.leaseLost);
  }

  /**
   * Beats every interval until keep aborts or the lease is lost, renewing
   * the fence with each answer. A cancel request aborts the handler
   * (cancel_requested); a refusal means the attempt is over for this
   * worker (attempt_over).
   */
  async #heartbeatLoop(keep, env, interval, fence, stopHandler, handlerDone, log) {
    let cancelSeen = false;
    for (;;) {
      if (!(await sleep(interval, keep))) return;
      if (fence.lost) {
        // The handler was told to stop and nothing will be reported:
        // proving the attempt alive now would only delay its retry.
        return;
      }
      const sent = Date.now();
      try {
        const a = await this.routes.heartbeat(env.token, { run: env.run, task: env.task, attempt: env.attempt, event_id: ulid() },
          { timeoutMs: Math.max(interval, 5000), signal: keep });
        fence.renew(sent, parseTime('lease_expires_at', a.lease_expires_at));
        if (a.cancel_requested && !cancelSeen) {
          cancelSeen = true;
          log.info('cancel requested; aborting the handler');
          stopHandler(stopCauses.cancelRequested);
        }
      } catch (err) {
        if (isRefusal(err)) {
          if (handlerDone()) {
            log.debug('heartbeat refused after the handler returned', { err: errText(err) });
          } else {
            log.warn('heartbeat refused; the attempt is over for this worker', { err: errText(err) });
            stopHandler(stopCauses.attemptOver);
          }
          return;
        }
        if (keep.aborted) return;
        log.warn('heartbeat failed', { err: errText(err) });
      }
    }
  }

  /** Extends the message's visibility every third of the visibility timeout. */
  async #keepHidden(keep, d, log) {
    const { sqs, queueUrl } = this.#queue();
    while (await sleep(this.opts.visibilityTimeoutMs / 3, keep)) {
      try {
        await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: queueUrl, ReceiptHandle: d.receipt, VisibilityTimeout: Math.ceil(this.opts.visibilityTimeoutMs / 1000) }), { abortSignal: keep });
      } catch (err) {
        if (keep.aborted) return;
        if (err?.name === 'ReceiptHandleIsInvalid' || err?.name === 'MessageNotInflight') {
          // A redelivery is harmless: its claim is refused.
          log.warn('message no longer held; it may be delivered again', { err: errText(err) });
          return;
        }
        log.warn('message visibility not extended', { err: errText(err) });
      }
    }
  }

  /**
   * Completes the attempt through the complete route; when the route is
   * unreachable (no answer, 429, a 5xx) or queueCompletions says so, it
   * sends the same completion, with its token, to the events queue,
   * retrying until reportTimeoutMs. A 4xx answer of the route is the
   * server's final word: nothing more is sent. A "stale" answer (a newer
   * attempt exists: recorded, never applied) is logged, not retried.
   * Answers {route, result?, state?, error?}.
   */
  async #report(comp, log) {
    if (!this.queueCompletions) {
      try {
        const a = await this.routes.complete(comp.token, comp, { timeoutMs: this.opts.completeTimeoutMs });
        if (a.result === 'stale') {
          log.warn('completion stale: a newer attempt of the task exists; recorded, not applied, not retried', { result: a.result, state: a.state, event_id: comp.event_id });
        } else {
          log.info('completion reported over HTTP', { result: a.result, state: a.state, event_id: comp.event_id });
        }
        return { route: 'http', result: a.result, state: a.state };
      } catch (err) {
        if (err.status >= 400 && err.status < 500 && err.status !== 429) {
          log.warn('completion refused by the API; the refusal is final', { err: errText(err), code: err.code, event_id: comp.event_id });
          return { route: 'http', error: err };
        }
        if (!err.status && err.code !== 'unreachable' && err.code !== 'unreadable_answer') throw err;
        log.warn('complete route unreachable; sending the completion to the events queue', { err: errText(err), event_id: comp.event_id });
      }
    }
    const { sqs, eventsQueueUrl } = this.#queue();
    if (!eventsQueueUrl) throw new Error(`report ${refString(comp)}: no events queue URL (eventsQueueUrl, RUNLEDGER_EVENTS_QUEUE_URL or the local stack's file)`);
    const body = JSON.stringify(comp);
    const giveUpAt = Date.now() + this.opts.reportTimeoutMs;
    const bo = backoff(100, 5000);
    for (let t = 1; ; t++) {
      try {
        await sqs.send(new SendMessageCommand({ QueueUrl: eventsQueueUrl, MessageBody: body }));
        log.info('completion sent to the events queue', { event_id: comp.event_id });
        return { route: 'queue' };
      } catch (err) {
        const wait = bo.next();
        if (Date.now() + wait >= giveUpAt) throw new Error(`report ${refString(comp)} (try ${t}): ${errText(err)}`, { cause: err });
        log.warn('completion not sent; retrying', { err: errText(err), try: t, backoff_ms: wait, event_id: comp.event_id });
        await sleep(wait);
      }
    }
  }

  /** Deletes the delivery's message when the worker owns it. */
  async #deleteMessage(d, log) {
    if (!d.receipt) return;
    const { sqs, queueUrl } = this.#queue();
    try {
      await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: d.receipt }));
    } catch (err) {
      if (err?.name === 'ReceiptHandleIsInvalid') log.info('message already gone', { err: errText(err) });
      else log.warn('message not deleted; it will be delivered again and refused', { err: errText(err) });
    }
  }

  /**
   * Runs one attempt named by an envelope that came without a queue (the
   * lambda executor's event): claims it, runs the handler while
   * heartbeating, and completes it over HTTP, repeating through transient
   * failures. Answers {claimed, outcome?, result?, state?, error?};
   * rejects only when the claim failed for a transient reason.
   */
  async runAttempt(envelope, { deadline = 0 } = {}) {
    const env = parseEnvelope(envelope);
    const log = withFields(this.log, { run_id: env.run, task_id: env.task, attempt: env.attempt });
    const claimSent = Date.now();
    let claimed;
    try {
      claimed = await this.#claim(env, Infinity, 5000, Date.now() + this.opts.claimTimeoutMs);
    } catch (err) {
      if (isTransient(err)) throw err;
      log.info('attempt not claimed', { err: errText(err) });
      return { claimed: false, error: err };
    }
    let run;
    try {
      run = claimedEnvelope(env, claimed);
    } catch (err) {
      log.error('claim answer unusable; running nothing', { err: errText(err) });
      return { claimed: false, error: err };
    }
    log.info('attempt claimed');
    const mode = newMode(new AbortController().signal, this.opts.stopTimeoutMs, false);
    if (deadline) {
      mode.handlerDeadline = deadline - this.opts.deadlineReserveMs;
      mode.stopWaitMs = Math.min(mode.stopWaitMs, this.opts.deadlineReserveMs / 2);
    }
    const keep = new AbortController();
    const loops = [];
    try {
      const comp = await this.#runClaimed(keep.signal, loops, run, claimSent, parseTime('lease_expires_at', claimed.lease_expires_at), mode, log);
      if (!comp) return { claimed: true };
      const bo = backoff(100, 5000);
      const giveUpAt = Date.now() + this.opts.reportTimeoutMs;
      for (;;) {
        try {
          const a = await this.routes.complete(comp.token, comp, { timeoutMs: this.opts.completeTimeoutMs });
          log[a.result === 'stale' ? 'warn' : 'info'](a.result === 'stale' ? 'completion stale: a newer attempt of the task exists; recorded, not applied, not retried' : 'completion reported',
            { result: a.result, state: a.state, event_id: comp.event_id });
          return { claimed: true, outcome: comp.outcome, result: a.result, state: a.state };
        } catch (err) {
          const wait = bo.next();
          if (!isTransient(err) || Date.now() + wait >= giveUpAt) {
            log.error('completion not reported', { err: errText(err), event_id: comp.event_id });
            return { claimed: true, outcome: comp.outcome, error: err };
          }
          log.warn('completion not sent; retrying', { err: errText(err), backoff_ms: wait });
          await sleep(wait);
        }
      }
    } finally {
      keep.abort();
      await Promise.all(loops);
    }
  }
}

/**
 * The envelope a worker runs once it claimed msg's attempt: the claim
 * answer's (the attempt as the scheduler stored it), never the message's,
 * which whoever may send to the queue could have altered. The answer must
 * name the attempt claimed; without a token it keeps the message's.
 */
function claimedEnvelope(msg, claimed) {
  if (!claimed?.envelope) throw new Error(`claim ${refString(msg)}: the answer carries no envelope`);
  const env = parseEnvelope(claimed.envelope);
  if (env.run !== msg.run || env.task !== msg.task || env.attempt !== msg.attempt) {
    throw new Error(`claim ${refString(msg)}: the answer's envelope is attempt ${refString(env)}'s`);
  }
  if (!env.token) env.token = msg.token;
  return env;
}

/**
 * What differs between run(), handleSQS and runAttempt: shutdown aborts
 * every handler when run()'s grace period ends; ownsMessage: the worker
 * extends and deletes the message (under Lambda the event source mapping
 * does); handlerDeadline (ms) ends handlers before the invocation does.
 */
function newMode(shutdown, stopWaitMs, ownsMessage) {
  return { shutdown, shutdownDone: aborted(shutdown), stopWaitMs, ownsMessage, handlerDeadline: 0 };
}

/** Resolves true after ms, or false as soon as signal aborts; its timer never outlives it. */
export function sleep(ms, signal) {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    function onAbort() {
      clearTimeout(timer);
      resolve(false);
    }
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Resolves when signal aborts (never for one that never does). */
function aborted(signal) {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** Doubles from min to max, each wait drawn from [d/2, d]. */
function backoff(min, max) {
  let cur = 0;
  return {
    next() {
      cur = cur === 0 ? min : Math.min(2 * cur, max);
      return cur / 2 + Math.random() * (cur / 2);
    },
    reset() {
      cur = 0;
    },
  };
}
