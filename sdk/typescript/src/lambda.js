// The handler of a Lambda function the scheduler invokes itself (the
// lambda executor, docs/workers.md): the event is the attempt's envelope.

import { Worker } from './worker.js';

/**
 * Returns the Lambda handler of a function a lambda executor invokes:
 *
 *   export const handler = handleInvoke(async (task) => { ... });
 *
 * It claims the attempt the event names, runs handler while heartbeating
 * (signals abort deadlineReserveMs before the invocation's deadline), and
 * completes it over HTTP (RUNLEDGER_API_URL, or options.apiUrl). The
 * invocation fails (so Lambda retries it, then sends its on-failure
 * record) only when the attempt could not be claimed for a transient
 * reason, before handler ran; a reported outcome, a refused claim and an
 * attempt that lost its lease all succeed. The worker is built once per
 * execution environment, on the first invocation.
 * @param {(task: any) => unknown} handler
 * @param {object} [options] the Worker's options (no queue needed)
 */
export function handleInvoke(handler, options = {}) {
  let worker;
  return async (event, context) => {
    worker ??= new Worker({ name: process.env.AWS_LAMBDA_FUNCTION_NAME ?? 'lambda', ...options, handler });
    const remaining = context?.getRemainingTimeInMillis?.();
    const deadline = typeof remaining === 'number' ? Date.now() + remaining : 0;
    const r = await worker.runAttempt(event, { deadline });
    return { claimed: r.claimed, outcome: r.outcome ?? null, result: r.result ?? null, state: r.state ?? null, error: r.error ? r.error.message : null };
  };
}
