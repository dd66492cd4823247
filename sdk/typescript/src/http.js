// One way to call the API, for the worker routes and the main routes
// alike, and one error type for what the API refused or what never
// reached it.

/** Bytes of an answer the SDK reads: room for a claim's inputs (1 MiB), a map child's item and the rest. */
const MAX_ANSWER_BYTES = 2 * 1024 * 1024;

/**
 * An answer of the API that is not a success, or a call that got no
 * answer (status 0, code "unreachable"). code is the API's error code
 * (docs/api.md, "Errors"); op names the call.
 */
export class RunledgerError extends Error {
  /**
   * @param {{op: string, status: number, code: string, message: string, cause?: unknown}} f
   */
  constructor({ op, status, code, message, cause }) {
    super(`${op}: ${status ? status + ' ' : ''}${code}: ${message}`, cause === undefined ? undefined : { cause });
    this.name = 'RunledgerError';
    this.op = op;
    this.status = status;
    this.code = code;
    /** The API's sentence, without the operation. */
    this.detail = message;
  }

  /** Whether the same call may succeed when repeated: no answer, 429 or a 5xx. */
  get transient() {
    return this.status === 0 || this.status === 429 || this.status >= 500;
  }
}

/** Whether err is a RunledgerError worth repeating the call for. */
export function isTransient(err) {
  return err instanceof RunledgerError && err.transient;
}

/**
 * Calls the API once. The answer's JSON is returned for a 2xx (null for a
 * 204); anything else throws a RunledgerError.
 * @param {object} c
 * @param {typeof fetch} c.fetch
 * @param {string} c.base the API's base URL, without a trailing slash
 * @param {string} c.op the call's name in errors
 * @param {string} c.method
 * @param {string} c.path
 * @param {string} [c.bearer]
 * @param {unknown} [c.body]
 * @param {Record<string,string>} [c.headers]
 * @param {number} [c.timeoutMs]
 * @param {AbortSignal} [c.signal]
 */
export async function callApi(c) {
  const headers = { Accept: 'application/json', ...c.headers };
  if (c.bearer !== undefined) headers.Authorization = `Bearer ${c.bearer}`;
  let body;
  if (c.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(c.body);
  }
  const signals = [];
  if (c.timeoutMs) signals.push(AbortSignal.timeout(c.timeoutMs));
  if (c.signal) signals.push(c.signal);
  let resp, text;
  try {
    resp = await c.fetch(c.base + c.path, {
      method: c.method,
      headers,
      body,
      signal: signals.length ? AbortSignal.any(signals) : undefined,
    });
    text = await readCapped(resp);
  } catch (err) {
    if (err instanceof RunledgerError) throw err;
    throw new RunledgerError({ op: c.op, status: 0, code: 'unreachable', message: `no answer: ${err?.message ?? err}`, cause: err });
  }
  if (resp.status >= 200 && resp.status < 300) {
    if (resp.status === 204 || text === '') return null;
    try {
      return JSON.parse(text);
    } catch (err) {
      // A success we cannot read: the call may have taken effect, and
      // repeating it (the same event id) is how to learn its answer.
      throw new RunledgerError({ op: c.op, status: 0, code: 'unreadable_answer', message: `answer ${summarize(text)} is not JSON`, cause: err });
    }
  }
  let e;
  try {
    e = JSON.parse(text);
  } catch {
    e = null;
  }
  if (e && typeof e.code === 'string' && e.code !== '') {
    throw new RunledgerError({ op: c.op, status: resp.status, code: e.code, message: String(e.message ?? '') });
  }
  // A proxy or gateway answered, not the API.
  throw new RunledgerError({ op: c.op, status: resp.status, code: 'unexpected_answer', message: summarize(text) });
}

async function readCapped(resp) {
  const len = Number(resp.headers.get('content-length') ?? 0);
  if (len > MAX_ANSWER_BYTES) throw new Error(`answer of ${len} bytes is over ${MAX_ANSWER_BYTES}`);
  const text = await resp.text();
  if (text.length > MAX_ANSWER_BYTES) throw new Error(`answer of ${text.length} characters is over ${MAX_ANSWER_BYTES}`);
  return text;
}

/** Shortens a body for an error, tokens redacted. */
function summarize(s) {
  const t = String(s).trim().replace(/"token"\s*:\s*"[^"]*"/g, '"token":"<redacted>"');
  return t.length > 200 ? t.slice(0, 200) + '...' : t;
}
