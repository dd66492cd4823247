// The DAG: tasks laid out left to right by dependency depth (a task's layer
// is one more than its deepest upstream), ordered within a layer by the
// mean position of their upstream tasks, drawn as SVG. Each node carries
// its state as a colour and as text.

const NS = "http://www.w3.org/2000/svg";
const PAD = 16;
// Sizes: roomy for a small graph, compact beyond 16 tasks so that a
// 48-task graph of six layers fits a 1280-pixel window.
const ROOMY = { W: 176, H: 60, GAP_X: 64, GAP_Y: 16, lines: [19, 36, 52], chars: 22 };
const COMPACT = { W: 140, H: 50, GAP_X: 44, GAP_Y: 10, lines: [16, 31, 44], chars: 18 };

export function el(name, attrs = {}, ...kids) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) if (v != null) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}

// layers returns the tasks grouped by depth, each layer ordered.
export function layers(tasks) {
  const byId = new Map(tasks.map((t) => [t.task, t]));
  const depth = new Map();
  const visit = (t, seen = new Set()) => {
    if (depth.has(t.task)) return depth.get(t.task);
    if (seen.has(t.task)) return 0; // a cycle cannot pass validation; stay finite anyway
    seen.add(t.task);
    let d = 0;
    for (const up of t.depends_on || []) {
      const u = byId.get(up);
      if (u) d = Math.max(d, visit(u, seen) + 1);
    }
    depth.set(t.task, d);
    return d;
  };
  tasks.forEach((t) => visit(t));
  const out = [];
  tasks.forEach((t) => (out[depth.get(t.task)] ||= []).push(t));
  const pos = new Map();
  out.forEach((layer, i) => {
    if (i > 0) {
      const bary = (t) => {
        const ps = (t.depends_on || []).filter((u) => pos.has(u)).map((u) => pos.get(u));
        return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : 0;
      };
      layer.sort((a, b) => bary(a) - bary(b));
    }
    layer.forEach((t, j) => pos.set(t.task, j));
  });
  return out;
}

function truncate(s, n) {
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

// drawGraph renders the DAG into container; onSelect(task) is called when a
// node is clicked or chosen with Enter/Space. Arrow keys move between nodes.
export function drawGraph(container, tasks, selected, onSelect) {
  const size = tasks.length > 16 ? COMPACT : ROOMY;
  const { W, H, GAP_X, GAP_Y } = size;
  const ls = layers(tasks);
  const tall = Math.max(...ls.map((l) => l.length));
  const width = PAD * 2 + ls.length * W + (ls.length - 1) * GAP_X;
  const height = PAD * 2 + tall * H + (tall - 1) * GAP_Y;
  const place = new Map();
  ls.forEach((layer, i) => {
    const offset = ((tall - layer.length) * (H + GAP_Y)) / 2;
    layer.forEach((t, j) => place.set(t.task, { x: PAD + i * (W + GAP_X), y: PAD + offset + j * (H + GAP_Y), i, j }));
  });
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "group", class: size === COMPACT ? "compact" : null,
    "aria-label": `Task graph: ${tasks.length} tasks in ${ls.length} layers; arrows point from a task to the tasks that depend on it` });
  svg.append(el("defs", {}, el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    el("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" }))));
  const edges = el("g", { "aria-hidden": "true" });
  for (const t of tasks) {
    const b = place.get(t.task);
    for (const up of t.depends_on || []) {
      const a = place.get(up);
      if (!a) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 2, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      edges.append(el("path", { class: `edge to-${t.state}`, d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`,
        "marker-end": "url(#arrow)", "data-from": up, "data-to": t.task }));
    }
  }
  svg.append(edges);
  const nodes = el("g");
  for (const t of tasks) {
    const p = place.get(t.task);
    const ruleOnly = (t.depends_on || []).length ? `rule ${t.trigger_rule || "all_success"}` : "no upstream";
    // A map task is one node: its children's counts stand in its last line.
    const rule = t.map ? `map ${t.map.succeeded}/${t.map.total} ok` + (t.map.running ? ` · ${t.map.running} running` : "") +
      (t.map.failed ? ` · ${t.map.failed} failed` : "") : ruleOnly;
    const stateText = t.state.replaceAll("_", " ") + (t.attempt > 1 ? ` · attempt ${t.attempt}` : "");
    const g = el("g", {
      class: `node st-${t.state}${t.task === selected ? " selected" : ""}`, tabindex: 0, role: "button",
      transform: `translate(${p.x},${p.y})`, "data-task": t.task, "data-state": t.state,
      "aria-pressed": t.task === selected ? "true" : "false",
      "aria-label": `${t.task}: ${t.state}${t.attempt > 1 ? `, attempt ${t.attempt}` : ""}; ${rule}${t.publish ? "; publishes" : ""}`,
    },
    el("title", {}, `${t.task}\n${t.state}\n${rule}`),
    el("rect", { class: "box", width: W, height: H, rx: 7 }),
    el("text", { class: "id", x: 10, y: size.lines[0] }, truncate(t.task, size.chars)),
    el("text", { class: "state", x: 10, y: size.lines[1] }, stateText),
    el("text", { class: "rule", x: 10, y: size.lines[2] }, rule + (t.publish ? " · publishes" : "")));
    g.addEventListener("click", () => onSelect(t.task));
    g.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        onSelect(t.task);
        return;
      }
      const moves = { ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0] };
      const m = moves[ev.key];
      if (!m) return;
      ev.preventDefault();
      const li = Math.min(Math.max(p.i + m[0], 0), ls.length - 1);
      const layer = ls[li];
      const j = m[0] ? Math.min(Math.round((p.j / Math.max(ls[p.i].length, 1)) * layer.length), layer.length - 1)
        : Math.min(Math.max(p.j + m[1], 0), layer.length - 1);
      svg.querySelector(`.node[data-task="${CSS.escape(layer[j].task)}"]`)?.focus();
    });
    nodes.append(g);
  }
  svg.append(nodes);
  container.replaceChildren(svg);
}
