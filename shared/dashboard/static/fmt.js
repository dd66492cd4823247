// Formatting: times (shown in UTC, as the API speaks), durations, and a
// schedule in words.

const pad = (n, w = 2) => String(n).padStart(w, "0");

export function ms(iso) {
  return iso ? Date.parse(iso) : NaN;
}

// "2026-12-01 11:20:03" (UTC); withMs adds ".123".
export function time(iso, withMs = false) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  let s = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
  if (withMs) s += "." + pad(d.getUTCMilliseconds(), 3);
  return s;
}

// "850 ms", "12.3 s", "4 m 05 s", "2 h 03 m".
export function duration(v) {
  if (v == null || isNaN(v)) return "—";
  const neg = v < 0 ? "−" : "";
  v = Math.abs(v);
  if (v < 1000) return `${neg}${Math.round(v)} ms`;
  if (v < 60000) return `${neg}${(v / 1000).toFixed(v < 10000 ? 2 : 1)} s`;
  const s = Math.round(v / 1000);
  if (s < 3600) return `${neg}${Math.floor(s / 60)} m ${pad(s % 60)} s`;
  const m = Math.round(s / 60);
  if (m < 1440) return `${neg}${Math.floor(m / 60)} h ${pad(m % 60)} m`;
  return `${neg}${Math.floor(m / 1440)} d ${pad(Math.floor((m % 1440) / 60))} h`;
}

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
  "September", "October", "November", "December"];

const DESCRIPTORS = {
  "@yearly": "at 00:00 on 1 January", "@annually": "at 00:00 on 1 January",
  "@monthly": "at 00:00 on day 1 of every month", "@weekly": "at 00:00 every Sunday",
  "@daily": "at 00:00 every day", "@midnight": "at 00:00 every day", "@hourly": "at minute 0 of every hour",
};

const isNum = (f) => /^\d+$/.test(f);

function list(items) {
  if (items.length < 2) return items.join("");
  return items.slice(0, -1).join(", ") + " and " + items[items.length - 1];
}

function named(field, names, offset) {
  const one = (v) => names[(Number(v) - offset) % names.length] ?? v;
  return list(field.split(",").map((part) => {
    const [a, b] = part.split("-");
    return b !== undefined ? `${one(a)} to ${one(b)}` : one(a);
  }));
}

function clock(field, minute) {
  const hours = field.split(",");
  const mins = minute.split(",");
  if (![...hours, ...mins].every(isNum) || hours.length * mins.length > 4) return null;
  return hours.flatMap((h) => mins.map((m) => `${pad(h)}:${pad(m)}`));
}

function timePart(min, hour) {
  if (min === "*" && hour === "*") return "every minute";
  const step = /^\*\/(\d+)$/.exec(min);
  if (hour === "*") {
    if (step) return `every ${step[1]} minutes`;
    if (isNum(min)) return `at minute ${min} of every hour`;
    return null;
  }
  const hstep = /^\*\/(\d+)$/.exec(hour);
  if (hstep && isNum(min)) return `every ${hstep[1]} hours at minute ${min}`;
  const range = /^(\d+)-(\d+)$/.exec(hour);
  if (range && (step || min === "*")) {
    return `every ${step ? step[1] + " minutes" : "minute"} from ${pad(range[1])}:00 to ${pad(range[2])}:59`;
  }
  const times = clock(hour, min);
  return times ? "at " + list(times) : null;
}

// cronWords describes a 5-field cron expression (or a descriptor) in words;
// what it cannot say simply it leaves as the expression.
export function cronWords(expr) {
  const e = (expr || "").trim();
  if (DESCRIPTORS[e]) return DESCRIPTORS[e];
  const f = e.split(/\s+/);
  if (f.length !== 5) return `cron ${e}`;
  const [min, hour, dom, mon, dow] = f;
  const t = timePart(min, hour);
  if (!t) return `cron ${e}`;
  const parts = [t];
  if (dom !== "*") {
    if (!/^[\d,]+$/.test(dom)) return `cron ${e}`;
    parts.push(`on day ${list(dom.split(","))} of the month`);
  }
  if (mon !== "*") {
    if (!/^[\d,-]+$/.test(mon)) return `cron ${e}`;
    parts.push(`in ${named(mon, MONTHS, 1)}`);
  }
  if (dow !== "*") {
    if (!/^[\d,-]+$/.test(dow)) return `cron ${e}`;
    parts.push(`on ${named(dow, DAYS, 0)}`);
  } else if (dom === "*" && /^at \d/.test(t)) {
    parts.push("every day");
  }
  return parts.join(" ");
}

// scheduleWords answers [words, zone] for a job's schedule.
export function scheduleWords(s) {
  if (!s) return ["manual only", ""];
  if (s.cron) return [cronWords(s.cron), s.timezone || "UTC"];
  if (s.rate) return [`every ${s.rate}`, ""];
  if (s.at) return [`once at ${time(s.at)} UTC`, ""];
  return ["manual only", ""];
}
