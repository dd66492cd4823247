// The attempt Gantt: one row per task, one bar per attempt. A bar runs from
// the moment its attempt began to wait (the task's creation for attempt 1,
// the previous attempt's end for a retry) to its end, split into the wait
// before it was queued (dependency wait, or retry wait), queue wait and run
// time; LOST periods (from the task's history) are drawn over the run time
// and late events are diamonds at the time they were observed.

import { el } from "./graph.js";
import { ms, time, duration } from "./fmt.js";

const LABEL = 150, ROW = 28, BAR = 16, AXIS = 26, RIGHT = 16;
const STEPS = [100, 250, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 216e5, 432e5, 864e5];

// lostPeriods lists [from, to, record] for each time the attempt was LOST.
function lostPeriods(history, n, end) {
  const out = [];
  (history || []).forEach((tr, i) => {
    if (tr.to !== "LOST" || tr.attempt !== n) return;
    const next = history[i + 1];
    out.push([ms(tr.observed_at), next ? ms(next.observed_at) : end, tr, next]);
  });
  return out;
}

// attemptBars computes each attempt's bar and phases.
export function attemptBars(task, runCreated, history, now) {
  const created = (history || []).find((h) => h.to === "CREATED");
  let start = created ? ms(created.observed_at) : runCreated;
  const bars = [];
  const attempts = [...(task.attempts || [])].sort((a, b) => a.n - b.n);
  attempts.forEach((a, k) => {
    const queued = ms(a.queued_at);
    const started = ms(a.started_at);
    const ended = a.ended_at ? ms(a.ended_at) : now;
    const b = { a, start, end: ended, phases: [] };
    const q0 = isNaN(queued) ? start : queued;
    if (q0 > start) b.phases.push({ kind: k === 0 ? "dep" : "retry", from: start, to: q0 });
    const q1 = isNaN(started) ? ended : started;
    if (q1 >= q0) b.phases.push({ kind: "queue", from: q0, to: q1 });
    if (!isNaN(started)) b.phases.push({ kind: "run", from: started, to: ended });
    for (const [from, to, rec, next] of lostPeriods(history, a.n, ended)) {
      b.phases.push({ kind: "lost", from, to, rec, next });
    }
    bars.push(b);
    start = ended;
  });
  return bars;
}

const PHASE_NAME = { dep: "dependency wait", retry: "retry wait", queue: "queue wait", run: "run time", lost: "LOST" };

function tipFor(task, b) {
  const a = b.a;
  const rows = [
    ["state", a.state], ["worker", a.worker_id || "—"], ["executor", a.executor_id || "—"],
    ["queued", time(a.queued_at, true)], ["started", time(a.started_at, true)], ["ended", time(a.ended_at, true)],
    ["heartbeat", time(a.last_heartbeat_at, true)],
    ["exit code", a.exit_code ?? "—"], ["error", a.error_category || "—"],
  ];
  for (const p of b.phases) {
    const label = PHASE_NAME[p.kind] + (p.kind === "lost" && p.next ? ` → ${p.next.to}` : "");
    rows.push([label, duration(p.to - p.from)]);
  }
  if (a.late_events?.length) rows.push(["late events", String(a.late_events.length)]);
  return { title: `${task.task} · attempt ${a.n}`, rows };
}

function ticks(t0, t1, width) {
  const span = t1 - t0;
  const step = STEPS.find((s) => (span / s) * 70 <= width) || STEPS[STEPS.length - 1];
  const out = [];
  for (let t = 0; t <= span; t += step) out.push(t);
  return { step, out };
}

function rel(v, step) {
  if (step < 1000) return `+${(v / 1000).toFixed(step < 1000 ? 2 : 1)}s`;
  if (v < 60e3) return `+${Math.round(v / 1000)}s`;
  if (v < 36e5) return `+${Math.floor(v / 6e4)}m${v % 6e4 ? ` ${Math.round((v % 6e4) / 1000)}s` : ""}`;
  return `+${Math.floor(v / 36e5)}h${v % 36e5 ? ` ${Math.round((v % 36e5) / 6e4)}m` : ""}`;
}

const NO_ATTEMPT = {
  SKIPPED: "skipped: no attempt", UPSTREAM_FAILED: "upstream failed: no attempt", CANCELLED: "cancelled before any attempt",
  CREATED: "waiting for its dependencies", SCHEDULED: "scheduled", PAUSED: "paused", FAILED: "failed without an attempt",
};

// drawGantt renders the chart; tip.show(target, content) and tip.hide()
// display the hover/focus details; onSelect(task) selects a row's task.
export function drawGantt(container, run, tasks, histories, now, selected, tip, onSelect) {
  const runCreated = ms(run.created_at);
  const rows = tasks.map((t) => ({ t, bars: attemptBars(t, runCreated, histories.get(t.task), now) }));
  let t0 = runCreated, t1 = run.ended_at ? ms(run.ended_at) : now;
  for (const r of rows) for (const b of r.bars) {
    t0 = Math.min(t0, b.start);
    t1 = Math.max(t1, b.end);
    for (const l of b.a.late_events || []) t1 = Math.max(t1, ms(l.observed_at));
  }
  if (!(t1 > t0)) t1 = t0 + 1000;
  const width = Math.max(480, (container.clientWidth || 900) - 2);
  const plot = width - LABEL - RIGHT;
  const x = (t) => LABEL + ((t - t0) / (t1 - t0)) * plot;
  const height = AXIS + rows.length * ROW + 6;
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "group",
    "aria-label": `Attempts of ${tasks.length} tasks over ${duration(t1 - t0)}` });
  svg.append(el("defs", {},
    el("pattern", { id: "hatch-dep", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      el("rect", { width: 6, height: 6, fill: "#e2e8f0" }), el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#94a3b8", "stroke-width": 2 })),
    el("pattern", { id: "hatch-retry", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(-45)" },
      el("rect", { width: 6, height: 6, fill: "#fde68a" }), el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#d97706", "stroke-width": 2.5 }))));
  const { step, out } = ticks(t0, t1, plot);
  const axis = el("g", { "aria-hidden": "true" });
  for (const v of out) {
    const xx = x(t0 + v);
    axis.append(el("line", { class: "tick", x1: xx, x2: xx, y1: AXIS - 6, y2: height }),
      el("text", { class: "tick-label", x: xx + 3, y: AXIS - 10 }, rel(v, step)));
  }
  axis.append(el("text", { class: "tick-label", x: 4, y: AXIS - 10 }, `from ${time(new Date(t0).toISOString()).slice(11)} UTC`));
  svg.append(axis);
  rows.forEach(({ t, bars }, i) => {
    const y = AXIS + i * ROW;
    const row = el("g", { class: "row", "data-task": t.task, "data-state": t.state });
    row.append(el("rect", { class: `row-bg${i % 2 ? " alt" : ""}`, x: 0, y, width, height: ROW }));
    const label = el("text", { class: `row-label${t.task === selected ? " sel" : ""}`, x: 6, y: y + ROW / 2 + 4 },
      t.task.length > 20 ? t.task.slice(0, 19) + "…" : t.task);
    label.addEventListener("click", () => onSelect(t.task));
    label.style.cursor = "pointer";
    row.append(label);
    if (!bars.length) {
      row.append(el("text", { class: "tick-label", x: LABEL + 4, y: y + ROW / 2 + 4 }, NO_ATTEMPT[t.state] || t.state));
    }
    const by = y + (ROW - BAR) / 2;
    for (const b of bars) {
      const a = b.a;
      const info = tipFor(t, b);
      const g = el("g", { class: `attempt st-${a.state}`, tabindex: 0, "data-task": t.task, "data-n": a.n, "data-state": a.state,
        "aria-label": `${t.task} attempt ${a.n}: ${a.state}; ` + info.rows.slice(3).map(([k, v]) => `${k} ${v}`).join(", ") });
      for (const p of b.phases) {
        const w = Math.max(x(p.to) - x(p.from), p.kind === "lost" ? 3 : 1);
        g.append(el("rect", { class: `phase phase-${p.kind}`, "data-phase": p.kind, x: x(p.from), y: p.kind === "lost" ? by + 3 : by,
          width: w, height: p.kind === "lost" ? BAR - 6 : BAR }));
      }
      g.append(el("rect", { class: "frame", x: x(b.start), y: by, width: Math.max(x(b.end) - x(b.start), 1), height: BAR, rx: 2 }));
      const show = () => tip.show(g, info);
      g.addEventListener("mouseenter", show);
      g.addEventListener("focus", show);
      g.addEventListener("mouseleave", tip.hide);
      g.addEventListener("blur", tip.hide);
      row.append(g);
      for (const l of a.late_events || []) {
        const lx = x(ms(l.observed_at)), cy = by + BAR / 2;
        const d = el("path", { class: "late", tabindex: 0, "data-task": t.task, "data-n": a.n,
          d: `M${lx},${cy - 7} L${lx + 6},${cy} L${lx},${cy + 7} L${lx - 6},${cy} z`,
          "aria-label": `late event for attempt ${a.n}: ${l.event} ${l.outcome || ""}, observed ${time(l.observed_at, true)}, not applied` });
        const lateInfo = { title: `${t.task} · late event of attempt ${a.n} (not applied)`, rows: [
          ["event", l.event], ["outcome", l.outcome || "—"], ["actor", l.actor], ["event id", l.event_id],
          ["event time", time(l.event_time, true)], ["observed", time(l.observed_at, true)], ["detail", l.detail || "—"]] };
        d.addEventListener("mouseenter", () => tip.show(d, lateInfo));
        d.addEventListener("focus", () => tip.show(d, lateInfo));
        d.addEventListener("mouseleave", tip.hide);
        d.addEventListener("blur", tip.hide);
        row.append(d);
      }
    }
    svg.append(row);
  });
  if (!run.ended_at) {
    svg.append(el("line", { class: "now-line", x1: x(now), x2: x(now), y1: AXIS - 6, y2: height, "aria-hidden": "true" }));
  }
  container.replaceChildren(svg);
}
