// The worker protocol as this SDK speaks it: the one reading of an
// envelope, the API's time and duration formats, event ids, and the
// limits of a report (docs/api.md, "Workers"). The server checks the same
// limits; checking them here first turns a refused report into an error
// the handler's author sees, before anything is sent.

import { randomBytes } from 'node:crypto';

/** Bytes of an output's JSON (docs/api.md, "Outputs and fan-out"). */
export const MAX_OUTPUT_BYTES = 16 * 1024;
/** Bytes of a completion's output_ref. */
export const MAX_OUTPUT_REF_BYTES = 2048;
/** Characters of an error_category. */
export const MAX_ERROR_CATEGORY_LEN = 64;
/** Bytes of a completion's reason; a longer one keeps its tail. */
export const MAX_REASON_BYTES = 4096;
/** Characters of an event id. */
export const MAX_EVENT_ID_LEN = 128;

const eventIdChars = /^[A-Za-z0-9._-]+$/;
const snakeCase = /^[a-z][a-z0-9]*(_[a-z0-9]+)*$/;

/**
 * A field the contract refuses: the same sentence the API would answer
 * with, raised before the request is sent.
 */
export class FieldError extends Error {
  /** @param {string} field @param {string} message @param {boolean} [tooLarge] */
  constructor(field, message, tooLarge = false) {
    super(message);
    this.name = 'FieldError';
    this.field = field;
    this.code = tooLarge ? 'payload_too_large' : 'invalid_field';
  }
}

/** Formats a time as the API writes it: RFC 3339, UTC, milliseconds. */
export function formatTime(d) {
  return d.toISOString();
}

/** Reads an optional API time; null when absent. */
export function parseTime(field, s) {
  if (s === undefined || s === null || s === '') return null;
  const d = new Date(s);
  if (typeof s !== 'string' || Number.isNaN(d.getTime())) {
    throw new FieldError(field, `${field} must be an RFC 3339 time.`);
  }
  return d;
}

const durationUnits = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const durationPart = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/y;

/**
 * Reads a Go duration string ("90s", "1m30s", "250ms") into milliseconds;
 * 0 for "" or absent.
 */
export function parseDuration(field, s) {
  if (s === undefined || s === null || s === '') return 0;
  const bad = () => new FieldError(field, `${field} must be a Go duration string such as "90s".`);
  if (typeof s !== 'string') throw bad();
  let rest = s;
  let sign = 1;
  if (rest[0] === '-' || rest[0] === '+') {
    sign = rest[0] === '-' ? -1 : 1;
    rest = rest.slice(1);
  }
  if (rest === '0') return 0;
  let ms = 0;
  durationPart.lastIndex = 0;
  let at = 0;
  while (at < rest.length) {
    durationPart.lastIndex = at;
    const m = durationPart.exec(rest);
    if (!m) throw bad();
    ms += Number(m[1]) * durationUnits[m[2]];
    at = durationPart.lastIndex;
  }
  if (at === 0) throw bad();
  return sign * ms;
}

const crockford = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/**
 * A ULID: 48 bits of milliseconds then 80 random bits, in Crockford's
 * base32. Event ids and boot ids are ULIDs, as the Go SDK sends.
 */
export function ulid(now = Date.now()) {
  let out = '';
  let t = now;
  for (let i = 0; i < 10; i++) {
    out = crockford[t % 32] + out;
    t = Math.floor(t / 32);
  }
  const r = randomBytes(16);
  for (let i = 0; i < 16; i++) out += crockford[r[i] % 32];
  return out;
}

/** Checks an event id as the API does. */
export function checkEventId(id) {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_EVENT_ID_LEN || !eventIdChars.test(id)) {
    throw new FieldError('event_id', `event_id must be 1 to ${MAX_EVENT_ID_LEN} characters of [A-Za-z0-9._-].`);
  }
  if (id === 'deps') throw new FieldError('event_id', 'event_id "deps" is reserved for the scheduler.');
}

/** Whether s is an error_category the API accepts. */
export function isCategory(s) {
  return typeof s === 'string' && s.length <= MAX_ERROR_CATEGORY_LEN && snakeCase.test(s);
}

/** Checks an output reference against its limit. */
export function checkOutputRef(ref) {
  if (typeof ref !== 'string') throw new FieldError('output_ref', 'output_ref must be a string.');
  const n = Buffer.byteLength(ref, 'utf8');
  if (n > MAX_OUTPUT_REF_BYTES) {
    throw new FieldError('output_ref', `output_ref is ${n} bytes, over the limit of ${MAX_OUTPUT_REF_BYTES} bytes.`, true);
  }
}

/**
 * Encodes an output as the completion carries it, refusing one that does
 * not encode or is over MAX_OUTPUT_BYTES. undefined and null are no output.
 * @returns {string|undefined} the JSON text
 */
export function encodeOutput(value) {
  if (value === undefined || value === null) return undefined;
  let text;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new FieldError('output', `output does not encode as JSON: ${err.message}.`);
  }
  if (text === undefined) throw new FieldError('output', 'output must be one JSON value.');
  const n = Buffer.byteLength(text, 'utf8');
  if (n > MAX_OUTPUT_BYTES) {
    throw new FieldError('output', `output is ${n} bytes, over the limit of ${MAX_OUTPUT_BYTES} bytes.`, true);
  }
  return text;
}

/** Keeps the last MAX_REASON_BYTES of s, cut on a character boundary. */
export function clipReason(s) {
  const b = Buffer.from(String(s), 'utf8');
  if (b.length <= MAX_REASON_BYTES) return String(s);
  let start = b.length - MAX_REASON_BYTES;
  while (start < b.length && (b[start] & 0xc0) === 0x80) start++;
  return b.subarray(start).toString('utf8');
}

/**
 * Reads a dispatch message body, or a claim answer's envelope, and checks
 * what a worker needs: an attempt, its token, durations that are not
 * negative. Unknown fields are ignored, so an older worker reads a newer
 * scheduler's envelopes.
 */
export function parseEnvelope(body) {
  const w = typeof body === 'string' ? JSON.parse(body) : body;
  if (w === null || typeof w !== 'object' || Array.isArray(w)) {
    throw new FieldError('envelope', 'an envelope must be a JSON object.');
  }
  const env = {
    job: w.job ?? '',
    run: w.run,
    task: w.task,
    attempt: w.attempt,
    token: w.token ?? '',
    pool: w.pool ?? '',
    logicalTime: parseTime('logical_time', w.logical_time),
    payload: w.payload ?? undefined,
    params: w.params ?? undefined,
    heartbeatIntervalMs: parseDuration('heartbeat_interval', w.heartbeat_interval),
    runTimeoutMs: parseDuration('run_timeout', w.run_timeout),
    claimBy: parseTime('claim_by', w.claim_by),
    inputs: w.inputs ?? {},
    item: w.item ?? undefined,
    index: w.index ?? undefined,
    fence: w.fence ?? undefined,
  };
  checkRef(env);
  if (typeof env.token !== 'string') throw new FieldError('token', 'token must be a string.');
  if (env.heartbeatIntervalMs < 0) throw new FieldError('heartbeat_interval', 'heartbeat_interval is negative.');
  if (env.runTimeoutMs < 0) throw new FieldError('run_timeout', 'run_timeout is negative.');
  return env;
}

/** Checks that ref names an attempt. */
export function checkRef(ref) {
  if (typeof ref.run !== 'string' || ref.run === '') throw new FieldError('run', 'run is required.');
  if (typeof ref.task !== 'string' || ref.task === '') throw new FieldError('task', 'task is required.');
  if (!Number.isInteger(ref.attempt) || ref.attempt < 1) {
    throw new FieldError('attempt', `attempt must be 1 or more, not ${ref.attempt}.`);
  }
}

/** "run/task#attempt", the attempt's name in logs and errors. */
export function refString(ref) {
  return `${ref.run}/${ref.task}#${ref.attempt}`;
}
