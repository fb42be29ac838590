// runner dashboard: polls /api/runs and keeps one section per run up to date. Every
// text from the server (run-directory content: untrusted) goes in through textContent,
// never as HTML, escaped first (control characters and bidirectional overrides shown as
// escapes) and isolated (unicode-bidi: isolate in the style sheet), so that no name can
// reorder or break the text around it. Nodes are updated in place, never rebuilt, so
// that a button does not move or vanish under the pointer between two polls.
"use strict";

let pollMs = 250; // until the server says (runner/defaults.py: DASHBOARD_POLL)
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const HEADER = "X-Runner-Token";
const BUTTONS = [
  // [action, accessible name, which flag of the run's "buttons" shows it]
  ["stop", "Stop", "stop"],
  ["stop-now", "Stop now", "stop"],
  ["stop-graceful", "Stop gracefully", "stop"],
  ["pause", "Pause", "pause"],
  ["unpause", "Unpause", "unpause"],
  ["resume", "Resume", "resume"],
];
const STOPS = new Set(["stop", "stop-now", "stop-graceful"]);
const CLICK_HOLD = 5000; // ms
const ITEMS_SHOWN = 40;
// The header's filters: a run counts under its shown status ("stopping" apart).
const FILTERS = ["running", "stopping", "stopped", "failed", "crashed", "completed"];
const FINISHED = new Set(["completed", "failed", "stopped", "crashed", "copy", "error"]);
const rows = new Map();
let filter = null;
let etag = null;
let received = { at: 0, now: 0 }; // the last body: performance.now() and the server's clock

// Control characters (C0, DEL, C1) and the bidirectional embeddings, overrides and
// isolates, each shown as an escape: a name can neither break a line nor reverse the
// text after it (U+202E would make a child pid 20917 read 71902).
const NAMED = { "\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e", "\x07": "\\a" };
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

function escaped(text) {
  if (text === null || text === undefined) return "";
  return String(text).replace(UNSAFE, (c) => NAMED[c] || `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`); // # ablate: dashboard-bidi-escape
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function show(node, visible) {
  if (node.hidden === visible) node.hidden = !visible;
}

function seconds(s) {
  if (typeof s !== "number") return "";
  return s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

// How long since the row was read on the server, on the page's clock: a live run's
// clocks tick between two reads (a 304 carries no body).
function sinceRead(r) {
  if (typeof r.at !== "number") return 0;
  return Math.max(0, received.now - r.at + (performance.now() - received.at) / 1000);
}

function makeRow(name) {
  const root = el("section", "run");
  root.dataset.runId = name;
  root.setAttribute("aria-label", `run ${name}`);
  const head = el("div", "head");
  const toggle = el("button", "toggle", "▸");
  toggle.type = "button";
  toggle.setAttribute("aria-label", "details");
  toggle.addEventListener("click", () => {
    row.expanded = row.collapsedNow(); // collapsed now: open it, and the other way round
    row.userChose = true;
    layout(row);
  });
  const title = el("h2", "user", name);
  const status = el("span", "status");
  status.dataset.field = "status";
  const meta = el("span", "muted user");
  const paused = el("span", "badge paused", "paused");
  const pending = el("span", "badge pending user");
  head.append(toggle, title, status, meta, paused, pending);
  const problem = el("div", "problem user");
  const progress = el("div", "progress");
  const bar = el("div", "bar");
  bar.setAttribute("role", "img");
  const fillDone = el("span", "done");
  const fillFailed = el("span", "failed");
  bar.append(fillDone, fillFailed);
  const counts = el("span", "muted");
  progress.append(bar, counts);
  const items = el("ul", "items");
  items.setAttribute("aria-label", "items");
  const now = el("div", "now");
  now.dataset.field = "now";
  const buttons = el("div", "buttons");
  const byAction = new Map();
  for (const [action, label] of BUTTONS) {
    const b = el("button", "", label);
    b.type = "button";
    b.dataset.action = action;
    b.hidden = true;
    b.addEventListener("click", () => act(name, action, label));
    buttons.append(b);
    byAction.set(action, b);
  }
  const note = el("div", "note user");
  note.dataset.field = "note";
  note.setAttribute("role", "status");
  const details = el("details");
  details.append(el("summary", "", "journal"));
  const journal = el("ol", "journal");
  journal.setAttribute("aria-label", "journal tail");
  details.append(journal);
  root.append(head, problem, progress, items, now, buttons, note, details);
  const row = { root, toggle, status, meta, paused, pending, problem, progress, bar, fillDone, fillFailed, counts,
    items, now, byAction, note, details, journal, itemsKey: "", journalKey: "", actionKey: "", data: null,
    stopClicked: null, expanded: false, userChose: false, finished: false };
  row.collapsedNow = () => row.finished && !row.expanded;
  return row;
}

async function act(name, action, label) {
  const row = rows.get(name);
  if (row && STOPS.has(action)) {
    // The stopping state from the click itself, not from the next poll.
    row.stopClicked = { action, at: performance.now() }; // # ablate: dashboard-stopping-on-click
    if (row.data) update(row, row.data);
  }
  if (row) setText(row.note, `${label}: sent…`);
  try {
    const r = await fetch(`/api/runs/${encodeURIComponent(name)}/${action}`, {
      method: "POST", headers: { [HEADER]: TOKEN }, cache: "no-store",
    });
    if (!r.ok && row) {
      const data = await r.json().catch(() => ({}));
      if (r.status !== 409) row.stopClicked = null; // 409: the same stop is still at work
      setText(row.note, escaped(`${label}: refused (${r.status}${data.error ? ": " + data.error : ""})`));
      row.note.classList.add("failed");
      if (row.data) update(row, row.data);
    }
  } catch (e) {
    if (row) setText(row.note, `${label}: the dashboard did not answer`);
  }
  pollSoon();
}

// The status a run is shown with: "stopping" from a click on a stop (or the server's
// say) until the run is no longer running.
function shownStatus(row, r) {
  if (r.error) return "error";
  const running = r.status === "running" && r.live !== false;
  // The click's own state lasts until the server says "stopping" itself (from then on
  // its word alone: a stop that failed shows the run running again), or, never
  // confirmed, for CLICK_HOLD at most.
  if (!running || r.stopping || (row.stopClicked && performance.now() - row.stopClicked.at > CLICK_HOLD)) {
    row.stopClicked = null;
  }
  if (!running) return r.status;
  return r.stopping || row.stopClicked ? "stopping" : r.status;
}

function stoppingSince(row, r) {
  if (row.stopClicked) return (performance.now() - row.stopClicked.at) / 1000;
  if (r.action && STOPS.has(r.action.action) && typeof r.action.started === "number") {
    return Math.max(0, received.now - r.action.started + (performance.now() - received.at) / 1000);
  }
  return null;
}

function update(row, r) {
  row.data = r;
  const status = shownStatus(row, r);
  if (row.root.dataset.status !== status) row.root.dataset.status = status;
  row.root.classList.toggle("error", Boolean(r.error));
  const since = status === "stopping" ? stoppingSince(row, r) : null;
  setText(row.status, status);
  setText(row.problem, escaped(r.error ? r.error : (r.damaged || []).map((d) => `damaged: ${d}`).join(" · ")));
  show(row.problem, Boolean(r.error) || (r.damaged || []).length > 0);
  const stopAction = row.stopClicked ? row.stopClicked.action : r.action && r.action.state === "running" ? r.action.action : null;
  for (const [action, , flag] of BUTTONS) {
    const b = row.byAction.get(action);
    show(b, Boolean(r.buttons && r.buttons[flag]));
    // While stopping, only the escalation to "Stop now" stays offered.
    const off = status === "stopping" && !(action === "stop-now" && stopAction !== "stop-now");
    if (b.disabled !== off) b.disabled = off;
  }
  row.finished = FINISHED.has(status);
  if (r.error) {
    for (const part of [row.meta, row.paused, row.pending, row.progress, row.items, row.now, row.details]) show(part, false);
    show(row.toggle, false);
    renderAction(row, r.action);
    applyFilter(row);
    return;
  }
  show(row.meta, true);
  setText(row.meta, escaped([
    since !== null ? `stopping for ${seconds(since)}` : "",
    r.attempt ? `attempt ${r.attempt}` : "",
    r.live === true ? `engine pid ${r.engine_pid}` : r.live === false ? "engine not running" : "engine unknown (damaged lock)",
    r.stop_origin && r.status === "stopped" ? `stopped by ${r.stop_origin}` : "",
    r.containment ? `containment ${r.containment}` : "",
  ].filter(Boolean).join(" · ")));
  show(row.paused, Boolean(r.paused));
  setText(row.paused, r.pause_held ? "paused" : "pause asked");
  show(row.pending, Boolean(r.pending_stop));
  setText(row.pending, r.pending_stop ? escaped(`stop pending: ${r.pending_stop}`) : "");
  const done = r.done || 0, failed = r.failed || 0, total = r.total || 0;
  row.fillDone.style.width = total ? `${(100 * done) / total}%` : "0%";
  row.fillFailed.style.width = total ? `${(100 * failed) / total}%` : "0%"; // # ablate: dashboard-failed-bar
  row.bar.setAttribute("aria-label", `${done} done, ${failed} failed of ${total}`);
  setText(row.counts, `${done}/${total} items done` + (failed ? `, ${failed} failed` : ""));
  renderItems(row, r);
  const now = [];
  const tick = sinceRead(r);
  if (r.current_item && r.live) now.push(["item", r.current_item, r.pause_held ? " (held at the pause)" : ""]);
  if (r.phase && r.live) now.push(["phase", r.phase, ""]);
  for (const c of r.children || []) {
    now.push([`child ${escaped(c.name || "?")} pid`, c.pid, typeof c.runtime === "number" ? ` (${seconds(c.runtime + tick)})` : ""]);
  }
  const nowKey = JSON.stringify(now);
  if (nowKey !== row.nowKey) {
    row.nowKey = nowKey;
    // Each untrusted part in an isolate of its own: nothing in one reorders the next.
    const parts = [];
    now.forEach(([label, value, tail], i) => {
      if (i) parts.push(" · ");
      parts.push(`${label} `, el("bdi", "user", escaped(value)), tail);
    });
    row.now.replaceChildren(...parts);
  }
  show(row.now, now.length > 0);
  const journalKey = (r.journal || []).join("\n");
  if (journalKey !== row.journalKey) {
    row.journalKey = journalKey;
    row.journal.replaceChildren(...(r.journal || []).map((line) => el("li", "user", escaped(line))));
  }
  renderAction(row, r.action);
  layout(row);
  applyFilter(row);
}

// A finished run shows its head and buttons; its items, progress and journal fold away
// until its toggle is pressed.
function layout(row) {
  const collapsed = row.collapsedNow();
  row.root.classList.toggle("collapsed", collapsed);
  show(row.toggle, row.finished);
  setText(row.toggle, collapsed ? "▸" : "▾");
  row.toggle.setAttribute("aria-expanded", String(!collapsed));
  const r = row.data;
  const visible = !collapsed && r && !r.error;
  show(row.progress, Boolean(visible));
  show(row.items, Boolean(visible));
  show(row.details, Boolean(visible));
  if (visible && !row.journalOpened) {
    row.journalOpened = true;
    row.details.open = !row.finished;
  }
}

function renderItems(row, r) {
  const items = r.items || [];
  const tick = sinceRead(r);
  const chips = items.slice(0, ITEMS_SHOWN).map((i) => {
    const current = r.live && i.item === r.current_item && (i.status === "pending" || i.status === "running");
    const held = current && r.pause_held;
    const shown = held ? "paused" : current ? "running" : i.status;
    const duration = typeof i.duration === "number" && i.status !== "pending" && !held
      ? (current ? i.duration + tick : i.duration) : null;
    const extra = [i.attempts ? `${i.attempts} att.` : "", duration ? seconds(duration) : "", i.reason || ""].filter(Boolean);
    return [escaped(i.item), shown, extra.length ? ` (${escaped(extra.join(", "))})` : "", current];
  });
  const key = JSON.stringify([chips, items.length]);
  if (key === row.itemsKey) return;
  row.itemsKey = key;
  const nodes = chips.map(([name, shown, extra, current]) => {
    const chip = el("li");
    const label = el("span", "name user", name);
    chip.title = `${name}: ${shown}`;
    chip.append(label, `: ${shown}${extra}`);
    chip.dataset.status = shown;
    if (current) chip.classList.add("current");
    return chip;
  });
  if (items.length > ITEMS_SHOWN) nodes.push(el("li", "", `… ${items.length - ITEMS_SHOWN} more`));
  row.items.replaceChildren(...nodes);
}

const ACTION_NAMES = Object.fromEntries(BUTTONS.map(([action, label]) => [action, label]));

function renderAction(row, a) {
  const key = a ? `${a.action} ${a.state} ${a.started}` : "";
  if (key === row.actionKey) return;
  row.actionKey = key;
  if (!a) return;
  const label = ACTION_NAMES[a.action] || a.action;
  const text = a.state === "running" ? `${label}: running…` : `${label}: ${a.message}` + (a.code ? ` (exit ${a.code})` : "");
  setText(row.note, escaped(text));
  row.note.classList.toggle("failed", a.state === "failed");
}

function applyFilter(row) {
  show(row.root, filter === null || row.root.dataset.status === filter);
}

function renderSummary(total) {
  const counts = Object.fromEntries(FILTERS.map((f) => [f, 0]));
  for (const row of rows.values()) {
    const s = row.root.dataset.status;
    if (s in counts) counts[s] += 1;
  }
  const box = document.getElementById("summary");
  if (!box.dataset.built) {
    box.dataset.built = "1";
    const all = el("button", "filter", "");
    all.type = "button";
    all.dataset.filter = "all";
    all.addEventListener("click", () => setFilter(null));
    box.append(all);
    for (const f of FILTERS) {
      const b = el("button", "filter", "");
      b.type = "button";
      b.dataset.filter = f;
      b.addEventListener("click", () => setFilter(filter === f ? null : f));
      box.append(b);
    }
  }
  for (const b of box.querySelectorAll("button.filter")) {
    const f = b.dataset.filter;
    const n = f === "all" ? total : counts[f];
    setText(b, f === "all" ? `${total} run${total === 1 ? "" : "s"}` : `${n} ${f}`);
    b.setAttribute("aria-pressed", String(f === "all" ? filter === null : filter === f));
    show(b, f === "all" || n > 0 || filter === f);
  }
}

function setFilter(f) {
  filter = f;
  for (const row of rows.values()) applyFilter(row);
  renderSummary(rows.size);
}

function render(data) {
  if (typeof data.poll_ms === "number" && data.poll_ms >= 50) pollMs = data.poll_ms;
  received = { at: performance.now(), now: typeof data.now === "number" ? data.now : Date.now() / 1000 };
  const main = document.getElementById("runs");
  setText(document.getElementById("base"), escaped(data.base) + (data.base_exists ? "" : " (no such directory yet)"));
  const runs = (data.runs || []).slice().reverse(); // newest first: run ids sort by start time
  const names = new Set(runs.map((r) => r.name));
  for (const [name, row] of rows) {
    if (!names.has(name)) {
      row.root.remove();
      rows.delete(name);
    }
  }
  runs.forEach((r, i) => {
    let row = rows.get(r.name);
    if (!row) {
      row = makeRow(r.name);
      rows.set(r.name, row);
    }
    update(row, r);
    if (main.children[i] !== row.root) main.insertBefore(row.root, main.children[i] || null);
  });
  show(document.getElementById("empty"), runs.length === 0);
  renderSummary(runs.length);
}

// Between two bodies the clocks still tick: the stopping counter, a child's runtime.
function retick() {
  for (const row of rows.values()) if (row.data) update(row, row.data);
  renderSummary(rows.size);
}

let timer = null;
let polling = false;
let again = false;

function pollSoon() {
  if (polling) {
    again = true;
    return;
  }
  clearTimeout(timer);
  timer = setTimeout(poll, 0);
}

async function poll() {
  polling = true;
  const conn = document.getElementById("conn");
  try {
    const headers = { [HEADER]: TOKEN };
    if (etag) headers["If-None-Match"] = etag;
    const r = await fetch("/api/runs", { headers, cache: "no-store" });
    if (r.status === 304) {
      retick();
      setText(conn, `live · updated ${new Date().toLocaleTimeString()}`);
      conn.classList.remove("bad");
    } else if (r.ok) {
      const data = await r.json();
      etag = r.headers.get("ETag");
      render(data);
      setText(conn, `live · updated ${new Date().toLocaleTimeString()}`);
      conn.classList.remove("bad");
    } else {
      etag = null;
      setText(conn, r.status === 403 ? "refused: open the URL `runner dashboard` printed (it carries the token)"
        : `the dashboard answered ${r.status}; retrying`);
      conn.classList.add("bad");
    }
  } catch (e) {
    etag = null;
    setText(conn, "the dashboard is not answering; retrying");
    conn.classList.add("bad");
  }
  polling = false;
  clearTimeout(timer);
  timer = setTimeout(poll, again ? 0 : pollMs);
  again = false;
}

// The stopping counter ticks between polls too.
setInterval(() => {
  for (const row of rows.values()) if (row.data && row.root.dataset.status === "stopping") update(row, row.data);
}, 100);

poll();
