// Where a worker or a client finds the API, its key, the pool's queue and
// the AWS endpoints: options first, then the environment, then the local
// stack's file (RUNLEDGER_LOCAL, else .runledger/local.json in the working
// directory or a parent), the file `make run` writes (docs/api.md, "The
// local stack's file").

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

const LOCAL_PATH = join('.runledger', 'local.json');

/**
 * Reads the local stack's file: the one RUNLEDGER_LOCAL names, else the
 * first .runledger/local.json from dir upward. null when there is none.
 * @param {{path?: string, dir?: string}} [o]
 */
export function loadLocal(o = {}) {
  const path = o.path ?? process.env.RUNLEDGER_LOCAL ?? findLocal(o.dir ?? process.cwd());
  if (!path) return null;
  let info;
  try {
    info = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`read the local stack's file ${path}: ${err.message}`, { cause: err });
  }
  return { path, ...info, queues: info.queues ?? {} };
}

function findLocal(dir) {
  for (let d = resolve(dir); ; d = dirname(d)) {
    const p = join(d, LOCAL_PATH);
    if (existsSync(p)) return p;
    if (dirname(d) === d) return null;
  }
}

/** Refuses an API URL that is not http(s)://host[/prefix]; answers it without a trailing slash. */
export function checkApiUrl(raw) {
  let u;
  try {
    u = new URL(raw);
  } catch {
    u = null;
  }
  if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:') || u.host === '') {
    throw new Error(`API URL ${JSON.stringify(raw)}: want http(s)://host[/prefix]`);
  }
  return String(raw).replace(/\/+$/, '');
}

/**
 * The API's URL and key: options, else RUNLEDGER_API_URL and
 * RUNLEDGER_API_KEY, else the local stack's file. The key is optional for
 * a worker (the worker routes take the attempt's token).
 * @param {{apiUrl?: string, apiKey?: string}} o
 * @param {() => any} local reads the local file once, when needed
 */
export function resolveApi(o, local) {
  let apiUrl = o.apiUrl ?? process.env.RUNLEDGER_API_URL;
  let apiKey = o.apiKey ?? process.env.RUNLEDGER_API_KEY;
  if (!apiUrl) {
    const info = local();
    if (!info) {
      throw new Error('no API URL: pass apiUrl, set RUNLEDGER_API_URL, or start the local stack (make run) so .runledger/local.json exists');
    }
    apiUrl = info.api_url;
    apiKey ??= info.api_key;
  }
  return { apiUrl: checkApiUrl(apiUrl), apiKey };
}

/** Reads the local file at most once. */
export function lazyLocal(o = {}) {
  let done = false;
  let info = null;
  return () => {
    if (!done) {
      done = true;
      info = loadLocal(o);
    }
    return info;
  };
}
