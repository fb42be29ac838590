// runner dashboard: polls /api/runs and keeps one section per run up to date. Every
// text from the server (run-directory content: untrusted) goes in through textContent,
// never as HTML. Nodes are updated in place, never rebuilt, so that a button does not
// move or vanish under the pointer between two polls.
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
const ITEMS_SHOWN = 40;
const rows = new Map();

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

function makeRow(name, live) {
  const root = el("section", "run");
  root.dataset.runId = name;
  root.setAttribute("aria-label", `run ${name}`);
  const head = el("div", "head");
  const title = el("h2", "", name);
  const status = el("span", "status");
  status.dataset.field = "status";
  const meta = el("span", "muted");
  const paused = el("span", "badge paused", "paused");
  const pending = el("span", "badge pending");
  head.append(title, status, meta, paused, pending);
  const problem = el("div", "problem");
  const progress = el("div", "progress");
  const bar = el("div", "bar");
  const fill = el("span");
  bar.append(fill);
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
  const note = el("div", "note");
  note.dataset.field = "note";
  note.setAttribute("role", "status");
  const details = el("details");
  details.open = live;
  details.append(el("summary", "", "journal"));
  const journal = el("ol", "journal");
  journal.setAttribute("aria-label", "journal tail");
  details.append(journal);
  root.append(head, problem, progress, items, now, buttons, note, details);
  return { root, status, meta, paused, pending, problem, progress, fill, counts, items, now, byAction, note,
    details, journal, itemsKey: "", journalKey: "", actionKey: "" };
}

async function act(name, action, label) {
  const row = rows.get(name);
  if (row) setText(row.note, `${label}: sent…`);
  try {
    const r = await fetch(`/api/runs/${encodeURIComponent(name)}/${action}`, {
      method: "POST", headers: { [HEADER]: TOKEN }, cache: "no-store",
    });
    if (!r.ok && row) {
      const data = await r.json().catch(() => ({}));
      setText(row.note, `${label}: refused (${r.status}${data.error ? ": " + data.error : ""})`);
      row.note.classList.add("failed");
    }
  } catch (e) {
    if (row) setText(row.note, `${label}: the dashboard did not answer`);
  }
}

function update(row, r) {
  const status = r.error ? "error" : r.status;
  if (row.root.dataset.status !== status) row.root.dataset.status = status;
  row.root.classList.toggle("error", Boolean(r.error));
  setText(row.status, status);
  setText(row.problem, r.error ? r.error : (r.damaged || []).map((d) => `damaged: ${d}`).join("\n"));
  show(row.problem, Boolean(r.error) || (r.damaged || []).length > 0);
  for (const [action, , flag] of BUTTONS) show(row.byAction.get(action), Boolean(r.buttons && r.buttons[flag]));
  if (r.error) {
    for (const part of [row.meta, row.paused, row.pending, row.progress, row.items, row.now, row.details]) show(part, false);
    renderAction(row, r.action);
    return;
  }
  show(row.meta, true);
  setText(row.meta, [
    r.attempt ? `attempt ${r.attempt}` : "",
    r.live === true ? `engine pid ${r.engine_pid}` : r.live === false ? "engine not running" : "engine unknown (damaged lock)",
    r.stop_origin && r.status === "stopped" ? `stopped by ${r.stop_origin}` : "",
    r.containment ? `containment ${r.containment}` : "",
  ].filter(Boolean).join(" · "));
  show(row.paused, Boolean(r.paused));
  show(row.pending, Boolean(r.pending_stop));
  setText(row.pending, r.pending_stop ? `stop pending: ${r.pending_stop}` : "");
  show(row.progress, true);
  const finished = r.done + r.failed;
  row.fill.style.width = r.total ? `${(100 * finished) / r.total}%` : "0%";
  setText(row.counts, `${r.done}/${r.total} items done` + (r.failed ? `, ${r.failed} failed` : ""));
  renderItems(row, r);
  const now = [];
  if (r.current_item && r.live) now.push(`item ${r.current_item}`);
  if (r.phase && r.live) now.push(`phase ${r.phase}`);
  for (const c of r.children || []) {
    now.push(`child ${c.name || "?"} pid ${c.pid}` + (typeof c.runtime === "number" ? ` (${seconds(c.runtime)})` : ""));
  }
  show(row.now, now.length > 0);
  setText(row.now, now.join(" · "));
  show(row.details, true);
  const journalKey = (r.journal || []).join("\n");
  if (journalKey !== row.journalKey) {
    row.journalKey = journalKey;
    row.journal.replaceChildren(...(r.journal || []).map((line) => el("li", "", line)));
  }
  renderAction(row, r.action);
}

function renderItems(row, r) {
  const items = r.items || [];
  const key = JSON.stringify([items, r.current_item, r.live]);
  if (key === row.itemsKey) return;
  row.itemsKey = key;
  const chips = items.slice(0, ITEMS_SHOWN).map((i) => {
    const extra = [i.attempts ? `${i.attempts} att.` : "", seconds(i.duration), i.reason || ""].filter(Boolean);
    const current = r.live && i.item === r.current_item && i.status === "pending";
    const shown = current ? "running" : i.status;
    const chip = el("li", "", `${i.item}: ${shown}` + (extra.length ? ` (${extra.join(", ")})` : ""));
    chip.dataset.status = shown;
    if (current) chip.classList.add("current");
    return chip;
  });
  if (items.length > ITEMS_SHOWN) chips.push(el("li", "", `… ${items.length - ITEMS_SHOWN} more`));
  row.items.replaceChildren(...chips);
}

const ACTION_NAMES = Object.fromEntries(BUTTONS.map(([action, label]) => [action, label]));

function renderAction(row, a) {
  const key = a ? `${a.action} ${a.state} ${a.started}` : "";
  if (key === row.actionKey) return;
  row.actionKey = key;
  if (!a) return;
  const label = ACTION_NAMES[a.action] || a.action;
  const text = a.state === "running" ? `${label}: running…` : `${label}: ${a.message}` + (a.code ? ` (exit ${a.code})` : "");
  setText(row.note, text);
  row.note.classList.toggle("failed", a.state === "failed");
}

function render(data) {
  if (typeof data.poll_ms === "number" && data.poll_ms >= 50) pollMs = data.poll_ms;
  const main = document.getElementById("runs");
  setText(document.getElementById("base"), data.base + (data.base_exists ? "" : " (no such directory yet)"));
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
      row = makeRow(r.name, Boolean(r.live));
      rows.set(r.name, row);
    }
    update(row, r);
    if (main.children[i] !== row.root) main.insertBefore(row.root, main.children[i] || null);
  });
  show(document.getElementById("empty"), runs.length === 0);
  const counts = {};
  for (const r of runs) counts[r.error ? "error" : r.status] = (counts[r.error ? "error" : r.status] || 0) + 1;
  const parts = Object.entries(counts).map(([s, n]) => `${n} ${s}`);
  setText(document.getElementById("summary"), `${runs.length} run${runs.length === 1 ? "" : "s"}` +
    (parts.length ? `: ${parts.join(", ")}` : ""));
}

async function poll() {
  const conn = document.getElementById("conn");
  try {
    const r = await fetch("/api/runs", { headers: { [HEADER]: TOKEN }, cache: "no-store" });
    if (r.ok) {
      render(await r.json());
      setText(conn, `live · updated ${new Date().toLocaleTimeString()}`);
      conn.classList.remove("bad");
    } else {
      setText(conn, r.status === 403 ? "refused: open the URL `runner dashboard` printed (it carries the token)"
        : `the dashboard answered ${r.status}; retrying`);
      conn.classList.add("bad");
    }
  } catch (e) {
    setText(conn, "the dashboard is not answering; retrying");
    conn.classList.add("bad");
  }
  setTimeout(poll, pollMs);
}

poll();
