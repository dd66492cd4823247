// @runledger/worker: runledger's worker SDK and API client for Node.
// docs/workers.md ("TypeScript") shows a worker, a Lambda handler and the
// fenced commit.

export { Worker, defaults } from './worker.js';
export { handleInvoke } from './lambda.js';
export { RunledgerClient } from './client.js';
export { RunledgerError, isTransient } from './http.js';
export { isRefusal } from './attempts.js';
export { loadLocal } from './config.js';
export { AttemptStopped, TaskError, stopCauses, conditionCheck, LEASE_LIFETIME, MAX_FENCE_MARGIN_MS } from './task.js';
export {
  FieldError,
  parseDuration,
  parseEnvelope,
  ulid,
  MAX_OUTPUT_BYTES,
  MAX_OUTPUT_REF_BYTES,
  MAX_ERROR_CATEGORY_LEN,
  MAX_REASON_BYTES,
  MAX_EVENT_ID_LEN,
} from './protocol.js';
