// runner dashboard: polls /api/runs and keeps one section per run up to date: a compact
// line (name, state, items done of all, what it does now, age, the buttons) and, opened
// on demand, its card (items, children, journal), whose details the poll asks for by
// name (?open=). Every text from the server (run-directory content: untrusted) goes in
// through textContent, never as HTML, escaped first (control characters and
// bidirectional overrides shown as escapes) and isolated (unicode-bidi: isolate in the
// style sheet), so that no name can reorder or break the text around it. Nodes are
// updated in place, never rebuilt, so that a button does not move or vanish under the
// pointer between two polls. Which buttons apply when is the server's say
// (runner/views/controls.py); from a click on a stop until the server has seen it, the
// page applies the server's own escalation rule. After its first answer the page sends
// back the answer's cursor (?since=) and is sent only what changed: the rows and open
// cards changed since, and the runs' names when a run came or went.
"use strict";

let pollMs = 250; // until the server says (runner/defaults.py: DASHBOARD_POLL, DASHBOARD_IDLE_POLL)
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const HEADER = "X-Runner-Token";
const ACTIONS = ["stop", "stop-now", "stop-graceful", "pause", "unpause", "resume"];
let LABELS = { stop: "Stop", "stop-now": "Stop now", "stop-graceful": "Stop gracefully", pause: "Pause",
  unpause: "Unpause", resume: "Resume" }; // the server's (controls.LABELS) once it answers
let ESCALATIONS = { graceful: ["stop", "stop-now"], hard: ["stop-now"], now: [] }; // controls.ESCALATIONS
let COMPACT_AFTER = 6;
const KINDS = { stop: "hard", "stop-now": "now", "stop-graceful": "graceful" };
// Where the focus goes when the button it was on goes away (the control that takes its
// place first; else the run's first control left; else its status).
const NEXT_FOCUS = { pause: "unpause", unpause: "pause", resume: "stop", "stop-graceful": "stop", stop: "stop-now" };
const CLICK_HOLD = 5000; // ms
const ITEMS_SHOWN = 40;
const LIVE_STATES = new Set(["running", "stopping", "paused", "starting"]);
const STATE_ORDER = ["running", "stopping", "paused", "starting", "stopped", "failed", "crashed", "completed",
  "copy", "unknown", "error", "gone"];
const rows = new Map();
const opened = new Set(); // the runs whose card is open: their details are asked for
let filter = null; // a state, or null: every state
let nameFilter = "";
let compact = false;
let etag = null;
let etagOpen = ""; // the open cards the ETag was given for
let cursor = null; // the last answer's cursor: the next answer says what changed after it
let order = []; // the runs' names, in the server's order
let askedOpen = new Set(); // the cards the last answer was asked with
let received = { at: 0, now: 0 }; // the last answer: performance.now() and the server's clock

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
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

// The server's clock now (its X-Runner-Now, ticked on the page's clock since).
function serverNow() {
  return received.now + (performance.now() - received.at) / 1000;
}

// How long since the row was read on the server: a live run's clocks tick between two
// reads (a 304 carries no body).
function sinceRead(r) {
  if (typeof r.at !== "number") return 0;
  return Math.max(0, serverNow() - r.at);
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
    pollSoon();
  });
  const title = el("h2", "user name", name);
  title.title = name;
  const status = el("span", "status");
  status.dataset.field = "status";
  status.tabIndex = -1; // where the focus goes when no control of the run is left
  const words = el("span", "muted words user");
  words.dataset.field = "words";
  const count = el("span", "count");
  count.dataset.field = "count";
  const doing = el("span", "doing user");
  doing.dataset.field = "doing";
  const age = el("span", "age");
  age.dataset.field = "age";
  const paused = el("span", "badge paused", "paused");
  const pending = el("span", "badge pending user");
  const buttons = el("div", "buttons");
  const byAction = new Map();
  for (const action of ACTIONS) {
    const b = el("button", "", LABELS[action]);
    b.type = "button";
    b.dataset.action = action;
    b.hidden = true;
    b.addEventListener("click", () => act(name, action));
    buttons.append(b);
    byAction.set(action, b);
  }
  // What the run does now (its item and phase), its sentence and its badges share the
  // line's one flexible column: the sentence gives way first, so that a live row's item
  // and phase stay whole at 1280 px beside four buttons.
  const line = el("span", "line");
  line.append(doing, words, paused, pending);
  head.append(toggle, title, status, count, age, line, buttons);
  const card = el("div", "card");
  const meta = el("div", "meta muted user");
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
  const note = el("div", "note user");
  note.dataset.field = "note";
  note.setAttribute("role", "status");
  const details = el("details");
  details.append(el("summary", "", "journal"));
  const journal = el("ol", "journal");
  journal.setAttribute("aria-label", "journal tail");
  details.append(journal);
  card.append(meta, problem, progress, items, now, details);
  root.append(head, note, card);
  const row = { root, head, toggle, title, status, words, count, doing, age, paused, pending, buttons, byAction, card,
    meta, problem, progress, bar, fillDone, fillFailed, counts, items, now, note, details, journal, itemsKey: "", chipTails: [],
    journalKey: "", nowKey: "", actionKey: "", data: null, detail: null, stopClicked: null, expanded: false,
    userChose: false, focusAfter: null, parked: false, journalOpened: false };
  row.collapsedNow = () => (row.userChose ? !row.expanded : !defaultOpen(row));
  return row;
}

// Open unless the user chose: with a handful of runs, a live run's card; past that
// (compact), none: each opens on demand.
function defaultOpen(row) {
  return !compact && LIVE_STATES.has(row.root.dataset.status || "");
}

async function act(name, action) {
  const row = rows.get(name);
  const label = LABELS[action] || action;
  if (row) {
    row.focusAfter = row.byAction.get(action);
    if (KINDS[action]) {
      // The stopping state from the click itself, not from the next poll.
      row.stopClicked = { action, at: performance.now() }; // # ablate: dashboard-stopping-on-click
    }
    setText(row.note, `${label}: sent…`);
    row.note.classList.remove("failed");
    if (row.data) update(row, row.data);
  }
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

// The state a run is shown in: "stopping" from a click on a stop (or the server's say)
// until the run is no longer running; "paused" while its engine holds at a PAUSE.
function shownStatus(row, r) {
  if (r.error) return r.status === "gone" ? "gone" : "error";
  const running = r.status === "running" && r.live !== false;
  // The click's own state lasts until the server says "stopping" itself (from then on
  // its word alone: a stop that failed shows the run running again), or, never
  // confirmed, for CLICK_HOLD at most.
  if (!running || r.stopping || (row.stopClicked && performance.now() - row.stopClicked.at > CLICK_HOLD)) {
    row.stopClicked = null;
  }
  if (!running) return r.status;
  if (r.stopping || row.stopClicked) return "stopping";
  return r.pause_held ? "paused" : "running";
}

function stoppingSince(row, r) {
  if (row.stopClicked) return (performance.now() - row.stopClicked.at) / 1000;
  if (r.action && KINDS[r.action.action] && typeof r.action.started === "number") {
    return Math.max(0, serverNow() - r.action.started);
  }
  return null;
}

// The buttons: the server's (controls.py), or, from a click on a stop until the server
// has seen it, the stops that escalate the one clicked.
function renderButtons(row, r) {
  const before = document.activeElement;
  const clicked = row.stopClicked && !r.stopping ? KINDS[row.stopClicked.action] : null;
  for (const action of ACTIONS) {
    const b = row.byAction.get(action);
    const c = (r.buttons || {})[action]; // offered in the run's state, when there
    let enabled = Boolean(c && c.enabled);
    let why = c ? c.why : null;
    if (clicked && c) {
      enabled = Boolean(KINDS[action]) && ESCALATIONS[clicked].includes(action);
      why = enabled ? null : "a stop is under way; only a stronger stop can be asked";
    }
    show(b, Boolean(c));
    if (b.disabled !== !enabled) b.disabled = !enabled;
    const tip = why ? escaped(why) : "";
    if (b.title !== tip) b.title = tip;
  }
  moveFocus(row, before);
}

// A keyboard user keeps their place: when the control they used (or the one they were
// on) is gone or disabled, the focus moves to the one that takes its place, else to the
// run's first control left, else to its status.
function moveFocus(row, before) {
  const usable = (b) => b && !b.hidden && !b.disabled;
  const first = () => ACTIONS.map((a) => row.byAction.get(a)).find(usable);
  if (row.parked) {
    // Parked on the status while no control was usable: the first that is, once there is one.
    if (document.activeElement !== row.status) row.parked = false;
    else if (first()) {
      first().focus();
      row.parked = false;
    }
    return;
  }
  const used = row.focusAfter;
  const lost = used && (used.hidden || used.disabled) &&
    (document.activeElement === used || document.activeElement === document.body || document.activeElement === null);
  const left = before && row.buttons.contains(before) && (before.hidden || before.disabled);
  if (!lost && !left) return; // # ablate: dashboard-focus
  const from = lost ? used : before;
  let target = row.byAction.get(NEXT_FOCUS[from.dataset.action]);
  if (!usable(target)) target = first();
  if (target) target.focus();
  else {
    row.status.focus();
    row.parked = true;
  }
  row.focusAfter = null;
}

function update(row, r) {
  row.data = r;
  const status = shownStatus(row, r);
  if (row.root.dataset.status !== status) row.root.dataset.status = status;
  row.root.classList.toggle("error", Boolean(r.error));
  setText(row.status, status);
  const since = status === "stopping" ? stoppingSince(row, r) : null;
  renderButtons(row, r);
  if (r.error) {
    setText(row.words, escaped(r.words || r.error)); // # ablate: dashboard-error-row-words
    for (const part of [row.count, row.doing, row.age, row.paused, row.pending]) show(part, false);
    setText(row.problem, escaped(r.error));
    show(row.problem, true);
    renderAction(row, r.action);
    layout(row);
    applyFilter(row);
    return;
  }
  const said = [];
  if (since !== null) said.push(`stopping for ${seconds(since)}`);
  if (status === "stopping" && row.stopClicked && !r.stopping) said.push("stopping");
  else if (status !== "running") said.push(r.words || r.status); // "running" is the badge's word already
  if (r.live === true) said.push(`attempt ${r.attempt}`, `engine pid ${r.engine_pid}`);
  else if (r.live === null) said.push("engine unknown (damaged lock)");
  setText(row.words, escaped(said.join(" · ")));
  row.words.title = escaped(r.words || "");
  const done = r.done || 0, failed = r.failed || 0, total = r.total || 0;
  setText(row.count, `${done}/${total}` + (failed ? ` (${failed} failed)` : ""));
  row.count.title = `${done} done, ${failed} failed of ${total} items`;
  show(row.count, true);
  const tick = sinceRead(r);
  let doing = "";
  if (r.live && r.pause_held) doing = `item ${escaped(r.waiting_before || r.current_item || "")} (held at the pause)`;
  else if (r.live && r.current_item) {
    const clock = typeof r.phase_started === "number" ? ` ${seconds(Math.max(0, serverNow() - r.phase_started))}` : "";
    doing = `item ${escaped(r.current_item)}` + (r.phase ? ` · ${escaped(r.phase)}${clock}` : "");
  }
  setText(row.doing, doing);
  row.doing.title = doing;
  show(row.doing, doing !== "");
  const age = typeof r.created === "number" ? seconds(Math.max(0, serverNow() - r.created)) : "";
  setText(row.age, age);
  row.age.title = age ? "age: since the run was created" : "";
  show(row.age, age !== "");
  show(row.paused, Boolean(r.paused));
  setText(row.paused, r.pause_held ? "paused" : "pause asked");
  show(row.pending, Boolean(r.pending_stop));
  setText(row.pending, r.pending_stop ? escaped(`stop pending: ${r.pending_stop}`) : "");
  row.pending.title = row.pending.textContent;
  row.fillDone.style.width = total ? `${(100 * done) / total}%` : "0%";
  row.fillFailed.style.width = total ? `${(100 * failed) / total}%` : "0%"; // # ablate: dashboard-failed-bar
  row.bar.setAttribute("aria-label", `${done} done, ${failed} failed of ${total}`);
  setText(row.counts, `${done}/${total} items done` + (failed ? `, ${failed} failed` : ""));
  renderDetail(row, r, tick);
  renderAction(row, r.action);
  layout(row);
  applyFilter(row);
}

// The card: from the details the server sent for it (while it is open).
function renderDetail(row, r, tick) {
  const d = row.detail;
  const damaged = d ? d.damaged || [] : [];
  const problems = [d && d.copy ? d.copy : "", d && d.cause ? `cause: ${d.cause}` : "", ...damaged.map((x) => `damaged: ${x}`)];
  if (!d && r.damaged) problems.push(`${r.damaged} damaged file${r.damaged === 1 ? "" : "s"} (open the card)`);
  const problemText = escaped(problems.filter(Boolean).join(" · "));
  setText(row.problem, problemText);
  show(row.problem, problemText !== "");
  setText(row.meta, escaped([d && d.containment ? `containment ${d.containment}` : "",
    r.live !== true && r.attempt ? `attempt ${r.attempt}` : ""].filter(Boolean).join(" · ")));
  renderItems(row, r, d ? d.items || [] : [], tick);
  const now = [];
  if (r.current_item && r.live) now.push(["item", r.current_item, r.pause_held ? " (held at the pause)" : ""]);
  if (r.phase && r.live) now.push(["phase", r.phase, ""]);
  for (const c of (d && d.children) || []) {
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
  const lines = (d && d.journal) || [];
  const journalKey = lines.join("\n");
  if (journalKey !== row.journalKey) {
    row.journalKey = journalKey;
    row.journal.replaceChildren(...lines.map((line) => el("li", "user", escaped(line))));
  }
}

// A closed card shows the run's line alone; opened, its card (items, progress, journal).
function layout(row) {
  const collapsed = row.collapsedNow();
  row.root.classList.toggle("collapsed", collapsed);
  const r = row.data;
  const open = !collapsed && r && !r.error;
  if (open) opened.add(row.root.dataset.runId);
  else {
    opened.delete(row.root.dataset.runId);
    // Opened again, its details are asked for anew (`new=`): the page kept none (also
    // when it is opened again before the next answer).
    askedOpen.delete(row.root.dataset.runId);
    if (row.detail !== null) {
      row.detail = null; // closed: its details are no longer asked for, nor kept
      if (r && !r.error) renderDetail(row, r, sinceRead(r));
    }
  }
  show(row.toggle, !(r && r.error));
  setText(row.toggle, collapsed ? "▸" : "▾");
  row.toggle.setAttribute("aria-expanded", String(!collapsed));
  show(row.card, Boolean(open));
  show(row.progress, Boolean(open));
  show(row.items, Boolean(open));
  show(row.details, Boolean(open));
  if (open && !row.journalOpened) {
    row.journalOpened = true;
    row.details.open = LIVE_STATES.has(row.root.dataset.status);
  }
}

function renderItems(row, r, items, tick) {
  const chips = items.slice(0, ITEMS_SHOWN).map((i) => {
    const current = r.live && (i.status === "running" || i.status === "paused");
    const held = i.status === "paused";
    const duration = typeof i.duration === "number" && i.status !== "pending" && !held
      ? (current ? i.duration + tick : i.duration) : null;
    const extra = [i.attempts ? `${i.attempts} att.` : "", duration ? seconds(duration) : "", i.reason || ""].filter(Boolean);
    return [escaped(i.item), i.status, extra.length ? ` (${escaped(extra.join(", "))})` : "", current];
  });
  // Rebuilt only when the items or their states change; a ticking duration is written
  // into the chip's own text node (the chips stay the same nodes between polls).
  const key = JSON.stringify([chips.map(([name, shown, , current]) => [name, shown, current]), items.length]);
  if (key === row.itemsKey) {
    chips.forEach(([, shown, extra], i) => {
      const tail = row.chipTails[i];
      if (tail && tail.data !== `: ${shown}${extra}`) tail.data = `: ${shown}${extra}`;
    });
    return;
  }
  row.itemsKey = key;
  row.chipTails = [];
  const nodes = chips.map(([name, shown, extra, current]) => {
    const chip = el("li");
    const label = el("span", "name user", name);
    const tail = document.createTextNode(`: ${shown}${extra}`);
    row.chipTails.push(tail);
    chip.title = `${name}: ${shown}`;
    chip.append(label, tail);
    chip.dataset.status = shown;
    if (current) chip.classList.add("current");
    return chip;
  });
  if (items.length > ITEMS_SHOWN) nodes.push(el("li", "", `… ${items.length - ITEMS_SHOWN} more`));
  row.items.replaceChildren(...nodes);
}

function renderAction(row, a) {
  const key = a ? `${a.action} ${a.state} ${a.started}` : "";
  if (key === row.actionKey) return;
  row.actionKey = key;
  if (!a) return;
  const label = LABELS[a.action] || a.action;
  const text = a.state === "running" ? `${label}: running…` : `${label}: ${a.message}` + (a.code ? ` (exit ${a.code})` : "");
  setText(row.note, escaped(text));
  row.note.classList.toggle("failed", a.state === "failed");
}

function applyFilter(row) {
  const byState = filter === null || row.root.dataset.status === filter;
  const byName = nameFilter === "" || row.root.dataset.runId.toLowerCase().includes(nameFilter);
  show(row.root, byState && byName);
}

// The header: every run counted once, under the state it is shown in; the counts add
// up to the number of runs. Each count filters the runs by that state.
function renderSummary(total) {
  const counts = new Map();
  for (const row of rows.values()) {
    const s = row.root.dataset.status || "unknown"; // # ablate: dashboard-counts-every-card
    counts.set(s, (counts.get(s) || 0) + 1);
  }
  const states = [...STATE_ORDER.filter((s) => counts.has(s)), ...[...counts.keys()].filter((s) => !STATE_ORDER.includes(s)).sort()];
  if (filter !== null && !states.includes(filter)) states.push(filter);
  const box = document.getElementById("summary");
  const want = ["all", ...states];
  const have = [...box.querySelectorAll("button.filter")].map((b) => b.dataset.filter);
  if (want.join(" ") !== have.join(" ")) {
    const kept = new Map([...box.querySelectorAll("button.filter")].map((b) => [b.dataset.filter, b]));
    box.replaceChildren(...want.map((f) => kept.get(f) || filterButton(f)));
  }
  for (const b of box.querySelectorAll("button.filter")) {
    const f = b.dataset.filter;
    const n = f === "all" ? total : counts.get(f) || 0;
    setText(b, f === "all" ? `${total} run${total === 1 ? "" : "s"}` : `${n} ${f}`);
    b.setAttribute("aria-pressed", String(f === "all" ? filter === null : filter === f));
  }
}

function filterButton(f) {
  const b = el("button", "filter", "");
  b.type = "button";
  b.dataset.filter = f;
  b.addEventListener("click", () => setFilter(f === "all" || filter === f ? null : f));
  return b;
}

function setFilter(f) {
  filter = f;
  for (const row of rows.values()) applyFilter(row);
  renderSummary(rows.size);
}

function render(data) {
  if (typeof data.poll_ms === "number" && data.poll_ms >= 50) pollMs = data.poll_ms;
  if (data.labels) LABELS = data.labels;
  if (data.escalations) ESCALATIONS = data.escalations;
  if (typeof data.compact_after === "number") COMPACT_AFTER = data.compact_after;
  const main = document.getElementById("runs");
  if (typeof data.base === "string") main.dataset.base = data.base;
  setText(document.getElementById("base"), escaped(main.dataset.base || "") + (data.base_exists ? "" : " (no such directory yet)"));
  const changed = data.runs || [];
  // The whole answer names every run; a later one names them only when a run came or went.
  const names = data.full ? changed.map((r) => r.name) : data.names;
  if (names) order = names;
  const shown = new Set(order);
  for (const [name, row] of rows) {
    if (!shown.has(name)) {
      row.root.remove();
      rows.delete(name);
      opened.delete(name);
    }
  }
  compact = order.length > COMPACT_AFTER; // # ablate: dashboard-compact
  main.classList.toggle("compact", compact);
  const details = data.details || {};
  const touched = new Set();
  for (const r of changed) {
    if (!shown.has(r.name)) continue;
    let row = rows.get(r.name);
    if (!row) {
      row = makeRow(r.name);
      rows.set(r.name, row);
    }
    row.data = r;
    touched.add(row);
  }
  for (const [name, d] of Object.entries(details)) {
    const row = rows.get(name);
    if (row) {
      row.detail = d;
      touched.add(row);
    }
  }
  for (const row of rows.values()) {
    if (data.full && !details[row.root.dataset.runId] && !opened.has(row.root.dataset.runId)) row.detail = null;
  }
  for (const row of touched) if (row.data) update(row, row.data);
  if (names || touched.size) {
    // Newest first: run ids sort by start time.
    for (let i = order.length - 1, at = 0; i >= 0; i--) {
      const row = rows.get(order[i]);
      if (!row) continue;
      if (main.children[at] !== row.root) main.insertBefore(row.root, main.children[at] || null);
      at++;
    }
  }
  show(document.getElementById("empty"), order.length === 0);
  renderSummary(order.length);
}

// Between two answers the clocks still tick: the stopping counter, the phase's clock,
// a child's runtime, the ages.
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

function openQuery() {
  const names = [...opened].sort();
  return names.length ? `open=${encodeURIComponent(names.join(","))}` : "";
}

async function poll() {
  polling = true;
  const conn = document.getElementById("conn");
  try {
    const query = openQuery();
    const asked = new Set(opened);
    const headers = { [HEADER]: TOKEN };
    if (etag && etagOpen === query) headers["If-None-Match"] = etag;
    const params = query ? [query] : [];
    if (cursor) {
      params.push(`since=${encodeURIComponent(cursor)}`); // # ablate: dashboard-page-cursor
      // The cards opened since the last answer: their details whatever their age.
      const fresh = [...asked].filter((n) => !askedOpen.has(n)).sort();
      if (fresh.length) params.push(`new=${encodeURIComponent(fresh.join(","))}`);
    }
    const r = await fetch(`/api/runs${params.length ? "?" + params.join("&") : ""}`, { headers, cache: "no-store" });
    const now = Number(r.headers.get("X-Runner-Now"));
    if (now > 0) received = { at: performance.now(), now };
    if (r.status === 304) {
      retick();
      setText(conn, `live · updated ${new Date().toLocaleTimeString()}`);
      conn.classList.remove("bad");
    } else if (r.ok) {
      const data = await r.json();
      etag = r.headers.get("ETag");
      etagOpen = query;
      askedOpen = new Set([...asked].filter((n) => opened.has(n))); // a card closed meanwhile kept nothing
      if (typeof data.cursor === "string") cursor = data.cursor;
      render(data);
      retick(); // the rows not sent: their clocks tick on
      setText(conn, `live · updated ${new Date().toLocaleTimeString()}`);
      conn.classList.remove("bad");
    } else {
      etag = null;
      cursor = null;
      setText(conn, r.status === 403 ? "refused: open the URL `runner dashboard` printed (it carries the token)"
        : `the dashboard answered ${r.status}; retrying`);
      conn.classList.add("bad");
    }
  } catch (e) {
    etag = null;
    cursor = null; // a dashboard started again gives a whole answer anyway
    setText(conn, "the dashboard is not answering; retrying");
    conn.classList.add("bad");
  }
  polling = false;
  clearTimeout(timer);
  // A card opened since this poll began asks for its details at once.
  timer = setTimeout(poll, again || openQuery() !== etagOpen ? 0 : pollMs);
  again = false;
}

document.getElementById("name-filter").addEventListener("input", (e) => {
  nameFilter = e.target.value.trim().toLowerCase();
  for (const row of rows.values()) applyFilter(row);
});

// The stopping counter ticks between polls too.
setInterval(() => {
  for (const row of rows.values()) if (row.data && row.root.dataset.status === "stopping") update(row, row.data);
}, 100);

poll();
