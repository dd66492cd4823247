// The SDK's logs: one JSON object a line on stderr (level, msg and
// snake_case fields), or the caller's logger with the same four methods.

const levels = { debug: 10, info: 20, warn: 30, error: 40 };

/** A logger writing JSON lines to stderr at level and above. */
export function jsonLogger(level = process.env.RUNLEDGER_LOG_LEVEL ?? 'info') {
  const min = levels[level] ?? levels.info;
  const write = (lvl) => (msg, fields = {}) => {
    if (levels[lvl] < min) return;
    process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields }) + '\n');
  };
  return { debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}

/** A logger that adds fields to every record of base. */
export function withFields(base, fields) {
  const wrap = (lvl) => (msg, more) => base[lvl](msg, { ...fields, ...more });
  return { debug: wrap('debug'), info: wrap('info'), warn: wrap('warn'), error: wrap('error') };
}

/** An error's text for a log record. */
export function errText(err) {
  return err instanceof Error ? err.message : String(err);
}
