// runledger dashboard: hash routes #/jobs, #/runs, #/runs/<id>. Every call
// goes to this deployment's /v1 API with the key or JWT the user entered,
// kept in sessionStorage for this tab only.

import { drawGraph, layers } from "./graph.js";
import { drawGantt } from "./gantt.js";
import { time, duration, ms, scheduleWords } from "./fmt.js";

const TOKEN = "runledger.token", OPERATOR = "runledger.operator";
const API = new URL("../", location.href); // /ui/ -> the API's root
const FINISHED = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const STATUSES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];
const POLL_RUN_MS = 1500, POLL_LIST_MS = 5000;

const $ = (sel, root = document) => root.querySelector(sel);
const main = $("#main");

// h builds an element: h("a", {href}, "text", child...).
function h(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) if (k != null) e.append(k);
  return e;
}

const badge = (state, extra = "") => h("span", { class: `badge st-${state}`, "data-state": state }, (state || "—").replaceAll("_", " ") + extra);

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body, headers = {}) {
  const token = sessionStorage.getItem(TOKEN);
  const init = { method, cache: "no-store", headers: { Authorization: `Bearer ${token}`, ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let resp;
  try {
    resp = await fetch(new URL(path.replace(/^\//, ""), API), init);
  } catch (e) {
    throw new ApiError(0, "network", "The API could not be reached: " + e.message);
  }
  if (resp.status === 304) return { notModified: true, etag: resp.headers.get("ETag") };
  const text = await resp.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch { /* not JSON */ }
  if (!resp.ok) {
    const err = new ApiError(resp.status, data.code || "http_" + resp.status, data.message || `The API answered ${resp.status}.`);
    if (resp.status === 401) { // the key or JWT was refused (handler or gateway)
      sessionStorage.removeItem(TOKEN);
      showKeyForm(err.message);
    }
    throw err;
  }
  data.etag = resp.headers.get("ETag");
  return data;
}

// ---- banner, tooltip, confirmation -------------------------------------

function banner(content, ok = false) {
  const b = $("#banner");
  if (!content) { b.hidden = true; return; }
  b.className = ok ? "ok" : "";
  b.replaceChildren(content);
  b.hidden = false;
}

const tip = {
  show(target, info) {
    const t = $("#tip");
    t.replaceChildren(h("b", {}, info.title), h("dl", {}, info.rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])));
    t.hidden = false;
    const r = target.getBoundingClientRect();
    const tw = t.offsetWidth, th = t.offsetHeight;
    let left = Math.min(r.left, window.innerWidth - tw - 8), top = r.bottom + 6;
    if (top + th > window.innerHeight - 4) top = Math.max(4, r.top - th - 6);
    t.style.left = Math.max(4, left) + "px";
    t.style.top = top + "px";
  },
  hide() { $("#tip").hidden = true; },
};

// confirmAction asks before an action; fields are [{name, label, required}].
// The dialog stays open with the server's sentence when the action is
// refused.
function confirmAction({ title, text, fields = [], yes = "Confirm", act }) {
  const dlg = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-text").textContent = text;
  $("#confirm-yes").textContent = yes;
  const err = $("#confirm-error");
  err.hidden = true;
  const inputs = fields.map((f) => {
    const id = "f-" + f.name;
    const input = h(f.multiline ? "textarea" : "input", { id, name: f.name, required: f.required, autocomplete: "off", rows: f.multiline ? 3 : null });
    input.value = f.value || "";
    return [f, input, h("div", {}, h("label", { for: id }, f.label + (f.required ? " (required)" : "")), input)];
  });
  $("#confirm-fields").replaceChildren(...inputs.map((x) => x[2]));
  const form = $("#confirm-form");
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const values = {};
    for (const [f, input] of inputs) {
      values[f.name] = input.value.trim();
      if (f.required && !values[f.name]) {
        err.textContent = `${f.label} is required.`;
        err.hidden = false;
        input.focus();
        return;
      }
    }
    $("#confirm-yes").disabled = true;
    try {
      await act(values);
      dlg.close();
    } catch (e) {
      err.textContent = e.message;
      err.hidden = false;
    } finally {
      $("#confirm-yes").disabled = false;
    }
  };
  $("#confirm-no").onclick = () => dlg.close();
  dlg.showModal();
  (inputs[0]?.[1] || $("#confirm-yes")).focus();
}

// ---- key form ------------------------------------------------------------

function showKeyForm(problem) {
  stopPolling();
  $("#signout").hidden = true;
  const input = h("input", { id: "key", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  main.replaceChildren(h("form", { class: "key-form panel", id: "key-form", onsubmit: (ev) => {
    ev.preventDefault();
    if (!input.value.trim()) return;
    sessionStorage.setItem(TOKEN, input.value.trim());
    banner(null);
    route();
  } },
  h("h1", {}, "Sign in to the API"),
  h("p", { class: "muted" }, "Local stack: the API key `make run` printed. In AWS: a JWT from the issuer the stack's JWT authorizer trusts. It is kept in this tab's session storage only."),
  problem ? h("p", { class: "error", role: "alert" }, problem) : null,
  h("label", { for: "key" }, "API key or JWT"), input,
  h("button", { type: "submit", class: "primary" }, "Continue")));
  input.focus();
}

// ---- routing -------------------------------------------------------------

let poller = null, pollGen = 0;
function stopPolling() {
  clearTimeout(poller);
  poller = null;
  pollGen++;
}
function poll(fn, every) {
  const gen = pollGen;
  const tick = async () => {
    if (gen !== pollGen) return;
    if (!document.hidden) {
      try { await fn(); } catch (e) { if (gen === pollGen) banner(e.message); }
    }
    if (gen === pollGen) poller = setTimeout(tick, every);
  };
  poller = setTimeout(tick, every);
}

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/runs";
  const [path, query = ""] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), q: new URLSearchParams(query) };
}

// routeGen counts navigations: a page whose navigation was superseded
// while it awaited the API must not draw over the newer page.
let routeGen = 0;
const current = (gen) => gen === routeGen;

async function route() {
  const gen = ++routeGen;
  stopPolling();
  tip.hide();
  if (!sessionStorage.getItem(TOKEN)) return showKeyForm();
  $("#signout").hidden = false;
  const { parts, q } = parseHash();
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === parts[0]) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    if (parts[0] === "jobs") await jobsPage(gen);
    else if (parts[0] === "runs" && parts[1]) await runPage(gen, parts[1], q.get("task"));
    else await runsPage(gen, q);
  } catch (e) {
    if (e.status !== 401 && current(gen)) main.replaceChildren(h("h1", {}, "Something went wrong"), h("p", { class: "error", role: "alert" }, e.message));
  }
}

// ---- jobs ----------------------------------------------------------------

async function jobsPage(gen) {
  document.title = "Jobs · runledger";
  const { jobs } = await api("GET", "/v1/jobs?limit=500");
  const recent = await Promise.all(jobs.map((j) => api("GET", `/v1/runs?job=${encodeURIComponent(j.id)}&limit=20`).then((r) => r.runs, () => [])));
  if (!current(gen)) return;
  const rows = jobs.map((j, i) => {
    const [words, zone] = scheduleWords(j.schedule);
    const runs = [...recent[i]].reverse(); // oldest left, newest right
    const act = (verb) => () => confirmAction({
      title: `${verb[0].toUpperCase() + verb.slice(1)} job ${j.id}?`,
      text: verb === "pause" ? "Its schedule stops firing until it is resumed; runs already started go on." :
        verb === "resume" ? "Its schedule fires again (missed slots follow the job's catch-up policy)." :
          "A manual run starts now with the job's default parameters.",
      yes: verb[0].toUpperCase() + verb.slice(1),
      act: async () => {
        if (verb === "trigger") {
          const r = await api("POST", `/v1/jobs/${encodeURIComponent(j.id)}/runs`, {});
          banner(h("span", {}, `Run `, h("a", { href: `#/runs/${encodeURIComponent(r.run.id)}` }, r.run.id), ` of ${j.id} started.`), true);
        } else {
          await api("POST", `/v1/jobs/${encodeURIComponent(j.id)}/${verb}`);
          banner(`Job ${j.id} ${verb}d.`, true);
        }
        await jobsPage(gen);
      },
    });
    return h("tr", { "data-job": j.id },
      h("th", { scope: "row" }, h("a", { href: `#/runs?job=${encodeURIComponent(j.id)}` }, j.id),
        j.tasks?.length > 1 ? h("div", { class: "muted" }, `${j.tasks.length} tasks`) : null),
      h("td", { class: "schedule" }, words, zone ? h("div", { class: "muted" }, zone) : null),
      h("td", { class: "time" }, j.next_fire_time ? time(j.next_fire_time) : "—"),
      h("td", {}, j.paused ? badge("PAUSED") : h("span", { class: "muted" }, "active")),
      h("td", {}, runs.length ? h("div", { class: "squares", role: "list", "aria-label": `last ${runs.length} runs, oldest first` },
        runs.map((r) => h("a", { class: `square st-${r.execution_state}`, role: "listitem", href: `#/runs/${encodeURIComponent(r.id)}`,
          title: `${r.execution_state} · ${time(r.logical_time)}`, "aria-label": `run ${r.id}: ${r.execution_state}, logical time ${time(r.logical_time)}` })))
        : h("span", { class: "muted" }, "no runs")),
      h("td", {}, h("div", { class: "actions" },
        j.paused ? h("button", { type: "button", onclick: act("resume") }, "Resume") : h("button", { type: "button", onclick: act("pause") }, "Pause"),
        h("button", { type: "button", onclick: act("trigger") }, "Trigger"))));
  });
  main.replaceChildren(h("h1", {}, "Jobs"),
    jobs.length ? h("div", { class: "scroll" }, h("table", { id: "jobs" },
      h("thead", {}, h("tr", {}, ["Job", "Schedule", "Next fire (UTC)", "Paused", "Last 20 runs", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows))) : h("p", { class: "muted" }, "No jobs yet."));
}

// ---- runs list -------------------------------------------------------------

let pageTokens = [];

async function runsPage(gen, q) {
  document.title = "Runs · runledger";
  const job = q.get("job") || "", status = q.get("status") || "", token = q.get("page") || "";
  const { jobs } = await api("GET", "/v1/jobs?limit=500");
  if (!current(gen)) return;
  const go = (over) => {
    const p = new URLSearchParams({ job, status, ...over });
    for (const [k, v] of [...p]) if (!v) p.delete(k);
    location.hash = "#/runs" + (p.toString() ? "?" + p : "");
  };
  const jobSel = h("select", { id: "filter-job", onchange: (e) => { pageTokens = []; go({ job: e.target.value, page: "" }); } },
    h("option", { value: "" }, "all jobs"), jobs.map((j) => h("option", { value: j.id, selected: j.id === job }, j.id)));
  const stSel = h("select", { id: "filter-status", onchange: (e) => { pageTokens = []; go({ status: e.target.value, page: "" }); } },
    h("option", { value: "" }, "any status"), STATUSES.map((s) => h("option", { value: s, selected: s === status }, s)));
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "pager" });
  main.replaceChildren(h("h1", {}, "Runs"),
    h("div", { class: "filters", role: "search" },
      h("div", {}, h("label", { for: "filter-job" }, "Job"), jobSel),
      h("div", {}, h("label", { for: "filter-status" }, "Status"), stSel)),
    table, pager);
  const load = async () => {
    const p = new URLSearchParams({ limit: "25" });
    if (job) p.set("job", job);
    if (status) p.set("status", status);
    if (token) p.set("next_token", token);
    const r = await api("GET", "/v1/runs?" + p);
    table.replaceChildren(runsTable(r.runs));
    table.dataset.filter = `job=${job}&status=${status}`; // what the table shows, for tests and styles
    pager.replaceChildren(
      h("button", { type: "button", disabled: !token, onclick: () => go({ page: pageTokens.pop() || "" }) }, "← Newer"),
      h("button", { type: "button", disabled: !r.next_token, onclick: () => { pageTokens.push(token); go({ page: r.next_token }); } }, "Older →"),
      h("span", { class: "muted" }, `${r.runs.length} run${r.runs.length === 1 ? "" : "s"} on this page`));
  };
  await load();
  if (!token) poll(load, POLL_LIST_MS);
}

function runDuration(r, now = Date.now()) {
  const start = ms(r.created_at);
  const end = r.ended_at ? ms(r.ended_at) : Math.max(now, start);
  return duration(end - start) + (r.ended_at ? "" : " so far");
}

function runsTable(runs) {
  if (!runs.length) return h("p", { class: "muted" }, "No runs match.");
  const withTrigger = runs.some((r) => r.trigger);
  const cols = ["Run", "Job", "Execution", "Publication", "Logical time (UTC)", "Created (UTC)", "Duration"];
  if (withTrigger) cols.push("Trigger");
  return h("table", { id: "runs" },
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, runs.map((r) => h("tr", { "data-run": r.id },
      h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(r.id)}` }, h("code", {}, r.id))),
      h("td", {}, r.job),
      h("td", {}, badge(r.execution_state)),
      h("td", {}, badge(r.publication_state)),
      h("td", { class: "time" }, time(r.logical_time)),
      h("td", { class: "time" }, time(r.created_at)),
      h("td", { class: "time" }, runDuration(r)),
      withTrigger ? h("td", {}, r.trigger || "—") : null))));
}

// ---- one run ---------------------------------------------------------------

async function runPage(gen, id, selectedTask) {
  document.title = `Run ${id} · runledger`;
  const view = { id, etag: null, run: null, tasks: [], ordered: [], selected: selectedTask, histories: new Map(), taskSig: new Map(), first: true };
  const head = h("div"), graph = h("div", { class: "graph", id: "graph" }), gantt = h("div", { class: "gantt", id: "gantt" }), detail = h("section", { id: "task", "aria-live": "off" });
  const live = h("span", { class: "muted", id: "live", "aria-live": "polite" });
  main.replaceChildren(head,
    h("h2", {}, "Graph"), legendStates(), graph,
    h("h2", {}, "Attempts"), legendPhases(), gantt,
    detail, h("p", {}, live));

  const select = (task) => {
    view.selected = task;
    history.replaceState(null, "", `#/runs/${encodeURIComponent(id)}?task=${encodeURIComponent(task)}`);
    render();
    $(`#task`).scrollIntoView({ block: "nearest" });
    $(`.node[data-task="${CSS.escape(task)}"]`)?.focus({ preventScroll: true });
  };

  const render = () => {
    const active = document.activeElement;
    const focusId = active?.id;
    const focusKey = active?.closest?.("[data-task]") ? [active.getAttribute("class")?.split(" ")[0], active.dataset.task, active.dataset.n] : null;
    head.replaceChildren(...runHeader(view, apply));
    drawGraph(graph, view.ordered, view.selected, select);
    drawGantt(gantt, view.run, view.ordered, view.histories, nowFor(view), view.selected, tip, select);
    detail.replaceChildren(...taskPanel(view, apply));
    if (focusId && focusId !== "main") document.getElementById(focusId)?.focus({ preventScroll: true });
    else if (focusKey) {
      const [cls, task, n] = focusKey;
      const sel = `.${cls}[data-task="${CSS.escape(task)}"]` + (n ? `[data-n="${n}"]` : "");
      document.querySelector(sel)?.focus({ preventScroll: true });
    }
    if (view.first) {
      view.first = false;
      performance.mark("rl-first-render");
    }
  };

  // apply takes a run answer (GET or an action's), refreshes the histories
  // of tasks that changed, and renders.
  const apply = async (data, fromAction = false) => {
    if (data.notModified) return false;
    view.run = data.run;
    view.tasks = data.tasks;
    view.ordered = layers(data.tasks).flat();
    if (fromAction) view.etag = null;
    else view.etag = data.etag;
    if (!view.selected || !data.tasks.some((t) => t.task === view.selected)) view.selected = view.ordered[0]?.task;
    const changed = data.tasks.filter((t) => {
      const sig = JSON.stringify(t);
      const was = view.taskSig.get(t.task);
      view.taskSig.set(t.task, sig);
      return was !== sig;
    });
    render();
    await loadHistories(changed.map((t) => t.task));
    render();
    live.textContent = FINISHED.has(view.run.execution_state) ? `Run ${view.run.execution_state.toLowerCase()}; no longer updating.` : `Live: updated ${time(new Date().toISOString())} UTC`;
    return true;
  };

  const loadHistories = async (names) => {
    let i = 0;
    const worker = async () => {
      while (i < names.length) {
        const n = names[i++];
        const r = await api("GET", `/v1/runs/${encodeURIComponent(id)}/tasks/${encodeURIComponent(n)}/history?limit=1000`);
        view.histories.set(n, r.transitions);
      }
    };
    await Promise.all(Array.from({ length: Math.min(6, names.length) }, worker));
  };

  const first = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
  if (!current(gen)) return;
  performance.mark("rl-run-fetched");
  await apply(first);
  const refresh = async () => {
    if (!view.run || FINISHED.has(view.run.execution_state)) {
      // A finished run changes only by an operator; keep the page still.
      return;
    }
    const data = await api("GET", `/v1/runs/${encodeURIComponent(id)}`, undefined, view.etag ? { "If-None-Match": view.etag } : {});
    if (!(await apply(data))) {
      drawGantt(gantt, view.run, view.ordered, view.histories, nowFor(view), view.selected, tip, select); // the "now" line moves
    }
  };
  poll(refresh, POLL_RUN_MS);
}

// nowFor is the end of the unfinished bars: this browser's clock, or the
// latest time the run reports if that is later (the server's clock runs
// ahead of this one).
function nowFor(view) {
  let t = Date.now();
  const see = (iso) => { const v = ms(iso); if (v > t) t = v; };
  see(view.run.created_at);
  for (const task of view.tasks) {
    for (const a of task.attempts) [a.queued_at, a.started_at, a.ended_at, a.last_heartbeat_at].forEach(see);
    for (const tr of view.histories.get(task.task) || []) see(tr.observed_at);
  }
  return t;
}

function legendStates() {
  const states = ["CREATED", "SCHEDULED", "QUEUED", "RUNNING", "UP_FOR_RETRY", "LOST", "CANCELLING", "PAUSED", "SUCCEEDED", "FAILED", "UPSTREAM_FAILED", "SKIPPED", "CANCELLED"];
  return h("div", { class: "legend", "aria-hidden": "true" }, states.map((s) => h("span", {}, h("i", { class: `st-${s}`, style: null }), s.replaceAll("_", " "))));
}

function legendPhases() {
  return h("div", { class: "legend" }, [["dep", "dependency wait"], ["retry", "retry wait"], ["queue", "queue wait"], ["run", "run time (colour of the attempt's outcome)"], ["lost", "LOST"], ["late", "late event (not applied)"]]
    .map(([k, v]) => h("span", {}, h("i", { class: `lg-${k}` }), v)), h("span", {}, "Hover or focus a bar for its times, worker, exit code and error."));
}

function runHeader(view, apply) {
  const r = view.run;
  const id = r.id;
  const act = (verb, title, text) => () => confirmAction({
    title, text, yes: title.split(" ")[0],
    fields: [{ name: "reason", label: "Reason" }],
    act: async (v) => {
      const out = await api("POST", `/v1/runs/${encodeURIComponent(id)}/${verb}`, v.reason ? { reason: v.reason } : {});
      banner(`${title.replace("?", "")}: done.`, true);
      await apply(out, true);
    },
  });
  const finished = FINISHED.has(r.execution_state);
  const fact = (k, v) => h("div", {}, h("dt", {}, k), h("dd", {}, v));
  return [
    h("p", { class: "muted" }, h("a", { href: `#/runs?job=${encodeURIComponent(r.job)}` }, `← runs of ${r.job}`)),
    h("h1", {}, "Run ", h("code", {}, id)),
    h("dl", { class: "facts" },
      fact("Job", r.job),
      fact("Execution", badge(r.execution_state)),
      fact("Publication", badge(r.publication_state)),
      fact("Logical time (UTC)", time(r.logical_time)),
      fact("Created (UTC)", time(r.created_at)),
      fact("Ended (UTC)", time(r.ended_at)),
      fact("Duration", runDuration(r, nowFor(view))),
      r.trigger ? fact("Trigger", r.trigger + (r.backfill_id ? ` (${r.backfill_id})` : "")) : null,
      r.priority ? fact("Priority", String(r.priority)) : null,
      r.admission ? fact("Admission", h("span", { id: "run-admission" }, admissionText(r.admission))) : null,
      r.event ? fact("Event", h("span", { id: "run-event" }, h("code", {}, r.event.id), ` ${r.event.source} · ${r.event.detail_type}`)) : null,
      r.params && Object.keys(r.params).length ? fact("Params", h("code", {}, JSON.stringify(r.params))) : null),
    h("div", { class: "actions", role: "group", "aria-label": "Run actions" },
      h("button", { type: "button", class: "danger", id: "cancel-run", disabled: finished, onclick: act("cancel", "Cancel this run?",
        "Tasks not yet running are cancelled at once; running ones are asked to stop.") }, "Cancel run"),
      h("button", { type: "button", id: "pause-run", disabled: finished, onclick: act("pause", "Pause this run?",
        "Its waiting tasks are held (PAUSED) until it is resumed; running ones go on.") }, "Pause run"),
      h("button", { type: "button", id: "resume-run", disabled: finished, onclick: act("resume", "Resume this run?",
        "Its paused tasks return to where they were.") }, "Resume run")),
  ];
}

// admissionText says where a limited run stands in its limiter.
function admissionText(a) {
  if (a.state === "waiting") {
    const why = a.reason === "rate_limit" ? "the rate limit" : "a concurrency slot";
    return `waiting for ${why} in ${a.limiter}` + (a.place ? `, place ${a.place}` : "");
  }
  return `admitted in ${a.limiter}` + (a.admitted_at ? ` at ${a.admitted_at}` : "");
}

function taskPanel(view, apply) {
  const t = view.tasks.find((x) => x.task === view.selected);
  if (!t) return [];
  const runID = view.run.id;
  const base = `/v1/runs/${encodeURIComponent(runID)}/tasks/${encodeURIComponent(t.task)}`;
  const operator = () => sessionStorage.getItem(OPERATOR) || "";
  const act = (verb, title, text, needsOperator) => () => confirmAction({
    title, text, yes: title.split(" ")[0],
    fields: needsOperator ? [{ name: "operator", label: "Operator", required: true, value: operator() }, { name: "reason", label: "Reason", required: true, multiline: true }]
      : [{ name: "reason", label: "Reason" }],
    act: async (v) => {
      if (v.operator) sessionStorage.setItem(OPERATOR, v.operator);
      const body = {};
      if (v.reason) body.reason = v.reason;
      if (v.operator) body.operator = v.operator;
      const out = await api("POST", `${base}/${verb}`, body);
      banner(`${title.replace("?", "")}: done.`, true);
      await apply(out, true);
    },
  });
  // A signal task waiting for its signal: Approve and Reject settle it
  // (POST .../signal), and who decided shows in the transitions.
  const current = t.attempts.find((a) => a.n === t.attempt);
  const waitsForSignal = t.state === "RUNNING" && current?.executor === "signal";
  const signal = (outcome, title, text) => () => confirmAction({
    title, text, yes: title.split(" ")[0],
    fields: [{ name: "by", label: "By", required: true, value: operator() }, { name: "reason", label: "Reason", multiline: true }],
    act: async (v) => {
      sessionStorage.setItem(OPERATOR, v.by);
      const body = { outcome, by: v.by };
      if (v.reason) body.reason = v.reason;
      const out = await api("POST", `${base}/signal`, body);
      banner(`${title.replace("?", "")}: done.`, true);
      await apply(out, true);
    },
  });
  const fact = (k, v) => h("div", {}, h("dt", {}, k), h("dd", {}, v));
  const hist = view.histories.get(t.task);
  return [
    h("h2", { id: "task-title" }, "Task ", h("code", {}, t.task), " ", badge(t.state)),
    h("dl", { class: "facts" },
      fact("Attempt", String(t.attempt)),
      fact("Status (compat)", t.status),
      fact("Pool", t.pool || "—"),
      fact("Depends on", t.depends_on?.length ? t.depends_on.join(", ") : "nothing"),
      fact("Trigger rule", t.trigger_rule || "all_success"),
      fact("Dependency wait", duration(t.metrics?.dependency_wait_ms)),
      fact("Queue wait (latest)", duration(t.metrics?.queue_wait_ms)),
      fact("Run time (latest)", duration(t.metrics?.run_ms)),
      t.retry_at ? fact("Retry at (UTC)", time(t.retry_at, true)) : null,
      t.cancel_requested ? fact("Cancel", "requested") : null,
      waitsForSignal ? fact("Waiting for", "a signal: approve or reject") : null,
      t.waiting_for_slot ? fact("Waiting for", h("span", { id: "task-slot" }, "a slot in task limiter ", h("code", {}, t.waiting_for_slot))) : null,
      t.map ? fact("Children", `${t.map.total} in all: ${t.map.pending} pending, ${t.map.running} running, ${t.map.succeeded} succeeded, ${t.map.failed} failed, ${t.map.cancelled} cancelled`) : null,
      t.output !== undefined ? fact("Output", h("code", { id: "task-output" }, clip(JSON.stringify(t.output), 200))) : null,
      t.output_truncated ? fact("Output", "over 256 KiB: read the children") : null),
    h("div", { class: "actions", role: "group", "aria-label": `Actions on task ${t.task}` },
      waitsForSignal ? h("button", { type: "button", class: "primary", id: "approve-task", onclick: signal("succeeded", `Approve ${t.task}?`, "The task succeeds and the run goes on; recorded in the history with your name and reason.") }, "Approve") : null,
      waitsForSignal ? h("button", { type: "button", class: "danger", id: "reject-task", onclick: signal("failed", `Reject ${t.task}?`, "The task fails (its retry policy decides what follows); recorded in the history with your name and reason.") }, "Reject") : null,
      h("button", { type: "button", class: "danger", id: "cancel-task", onclick: act("cancel", `Cancel task ${t.task}?`, "Not yet running: cancelled at once. Running: its worker is asked to stop.") }, "Cancel task"),
      h("button", { type: "button", id: "retry-task", onclick: act("retry", `Retry task ${t.task}?`, "A failed or cancelled task gets a new attempt; earlier attempts keep their record.") }, "Retry"),
      h("button", { type: "button", id: "mark-succeeded", onclick: act("mark-succeeded", `Mark ${t.task} succeeded?`, "An operator override: recorded in the history with your name and reason.", true) }, "Mark succeeded"),
      h("button", { type: "button", id: "mark-failed", onclick: act("mark-failed", `Mark ${t.task} failed?`, "An operator override: recorded in the history with your name and reason.", true) }, "Mark failed")),
    t.map ? h("h2", {}, "Children of ", h("code", {}, t.task)) : null,
    t.map ? childrenTable(runID, t.task) : null,
    h("h2", {}, "Attempts of ", h("code", {}, t.task)),
    attemptsTable(t),
    h("h2", {}, "Transitions of ", h("code", {}, t.task)),
    hist ? timeline(t, hist) : h("p", { class: "muted" }, "Loading the history…"),
  ];
}

function clip(s, n) { return s.length > n ? s.slice(0, n) + "…" : s; }

// childrenTable pages a map task's children (100 at a time, in index
// order): the run's page never loads them all.
function childrenTable(runID, task) {
  const body = h("tbody", {});
  const more = h("button", { type: "button", id: "children-more" }, "More children");
  const wrap = h("div", { class: "scroll" }, h("table", { id: "children" },
    h("thead", {}, h("tr", {}, ["Child", "State", "Attempt", "Queue wait", "Run time", "Output"].map((c) => h("th", { scope: "col" }, c)))), body), more);
  let token = "";
  const load = async () => {
    more.disabled = true;
    const q = new URLSearchParams({ limit: "100" });
    if (token) q.set("next_token", token);
    const page = await api("GET", `/v1/runs/${encodeURIComponent(runID)}/tasks/${encodeURIComponent(task)}/children?${q}`);
    for (const c of page.children) {
      body.append(h("tr", { "data-child": c.task },
        h("td", {}, h("code", {}, c.task)), h("td", {}, badge(c.state)), h("td", { class: "num" }, String(c.attempt)),
        h("td", { class: "num" }, duration(c.metrics?.queue_wait_ms)), h("td", { class: "num" }, duration(c.metrics?.run_ms)),
        h("td", {}, c.output !== undefined ? h("code", {}, clip(JSON.stringify(c.output), 60)) : "—")));
    }
    token = page.next_token || "";
    more.hidden = !token;
    more.disabled = false;
  };
  more.addEventListener("click", () => load().catch((e) => banner(String(e))));
  load().catch((e) => banner(String(e)));
  return wrap;
}

function attemptsTable(t) {
  if (!t.attempts.length) return h("p", { class: "muted" }, "No attempt.");
  return h("div", { class: "scroll" }, h("table", { id: "attempts" },
    h("thead", {}, h("tr", {}, ["#", "State", "Worker", "Queued", "Started", "Ended", "Queue wait", "Run time", "Exit", "Error", "Late"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, t.attempts.map((a) => h("tr", { "data-n": a.n },
      h("td", { class: "num" }, String(a.n)), h("td", {}, badge(a.state)), h("td", {}, h("code", {}, a.worker_id || "—")),
      h("td", { class: "time" }, time(a.queued_at, true)), h("td", { class: "time" }, time(a.started_at, true)), h("td", { class: "time" }, time(a.ended_at, true)),
      h("td", { class: "num" }, duration(a.metrics?.queue_wait_ms)), h("td", { class: "num" }, duration(a.metrics?.run_ms)),
      h("td", { class: "num" }, a.exit_code ?? "—"), h("td", {}, a.error_category || "—"),
      h("td", { class: "num" }, String((a.late_events?.length || 0) + (a.late_events_dropped || 0))))))));
}

// timeline lists the history records, and each attempt's late events (never
// applied) at the time they were observed. Overrides and late events stand
// out; an event_time that differs from observed_at shows the gap.
function timeline(t, hist) {
  const rows = hist.map((tr) => ({ kind: tr.override || tr.event?.startsWith("override.") ? "override" : "transition", at: ms(tr.observed_at), tr }));
  for (const a of t.attempts) for (const l of a.late_events || []) rows.push({ kind: "late", at: ms(l.observed_at), l, n: a.n });
  rows.sort((a, b) => a.at - b.at || (a.tr?.seq ?? 1e9) - (b.tr?.seq ?? 1e9));
  const when = (et, ob) => {
    const gap = ms(ob) - ms(et);
    return [h("td", { class: "time" }, time(et, true), Math.abs(gap) >= 1 ? h("span", { class: "skew" }, `observed ${duration(gap)} later`) : null),
      h("td", { class: "time" }, time(ob, true))];
  };
  return h("div", { class: "scroll" }, h("table", { id: "timeline" },
    h("caption", { class: "muted", style: null }, "Event time is when it happened (by the actor's clock); observed is when runledger received it."),
    h("thead", {}, h("tr", {}, ["#", "Change", "Event", "Actor", "Att.", "Event time (UTC)", "Observed (UTC)", "Evidence", "Reason"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((r) => {
      if (r.kind === "late") {
        const l = r.l;
        return h("tr", { class: "late", "data-kind": "late" },
          h("td", {}, "late"), h("td", {}, "not applied"), h("td", {}, h("code", {}, l.event), l.outcome ? ` (${l.outcome})` : ""),
          h("td", {}, l.actor), h("td", { class: "num" }, String(r.n)), ...when(l.event_time, l.observed_at),
          h("td", {}, h("code", {}, l.event_id)), h("td", {}, l.detail || "stale: from an older attempt"));
      }
      const tr = r.tr;
      const ev = Object.entries(tr.evidence || {});
      return h("tr", { class: r.kind, "data-kind": r.kind, "data-to": tr.to },
        h("td", { class: "num" }, String(tr.seq)),
        h("td", { class: "change" }, tr.from ? [badge(tr.from), " → "] : "", badge(tr.to)),
        h("td", {}, h("code", {}, tr.event), r.kind === "override" ? h("div", {}, h("strong", {}, "override"), tr.scope ? ` (${tr.scope})` : "") : null),
        h("td", {}, tr.actor, tr.operator ? h("div", {}, h("strong", {}, tr.operator)) : null),
        h("td", { class: "num" }, String(tr.attempt)),
        ...when(tr.event_time, tr.observed_at),
        h("td", {}, ev.length ? h("ul", { class: "evidence" }, ev.map(([k, v]) => h("li", {}, h("code", {}, k), " ", v))) : "—"),
        h("td", {}, tr.reason || "—"));
    }))));
}

$("#signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN);
  banner(null);
  showKeyForm();
});
window.addEventListener("hashchange", () => { banner(null); route(); });
route();
