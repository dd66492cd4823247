// The worker routes (docs/api.md, "Workers"): claim, heartbeat and
// complete, each with the attempt's token as bearer. Each body is checked
// as the API checks it before it is sent.

import { callApi, RunledgerError } from './http.js';
import { checkEventId, checkRef, refString } from './protocol.js';

const REFUSALS_409 = new Set(['already_claimed', 'stale_attempt', 'illegal_transition']);

/**
 * Whether err is the server's final word that the attempt is over for
 * this worker: another claim won, a newer attempt exists, the instance's
 * state refuses the call, or the token does not match (409 or 401).
 */
export function isRefusal(err) {
  return err instanceof RunledgerError &&
    ((err.status === 409 && REFUSALS_409.has(err.code)) || (err.status === 401 && err.code === 'invalid_token'));
}

export class AttemptRoutes {
  /** @param {string} base @param {typeof fetch} fetchFn */
  constructor(base, fetchFn) {
    this.base = base;
    this.fetch = fetchFn;
  }

  #call(op, route, token, body, o) {
    checkRef(body);
    checkEventId(body.event_id);
    return callApi({ fetch: this.fetch, base: this.base, op: `${op} ${refString(body)}`, method: 'POST', path: route, bearer: token, body, ...o });
  }

  /** {claimed, lease_expires_at, envelope}; a 200 that says claimed: false is an error. */
  async claim(token, body, o = {}) {
    const a = await this.#call('claim', '/v1/attempts/claim', token, body, o);
    if (!a || a.claimed !== true) {
      throw new RunledgerError({ op: `claim ${refString(body)}`, status: 200, code: 'not_claimed', message: 'the answer says claimed: false' });
    }
    return a;
  }

  /** {cancel_requested, lease_expires_at, state}. */
  heartbeat(token, body, o = {}) {
    return this.#call('heartbeat', '/v1/attempts/heartbeat', token, body, o);
  }

  /** {result, state}: result is applied, duplicate or stale. The token travels as bearer only. */
  complete(token, completion, o = {}) {
    const { token: _omit, ...body } = completion;
    return this.#call('complete', '/v1/attempts/complete', token, body, o);
  }
}
