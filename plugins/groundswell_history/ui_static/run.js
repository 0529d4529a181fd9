// One run: its tree (expand and collapse), its timeline, a node's details, its waits, live.
import { api, follow } from "./api.js";
import { el, clear, labelSpans, ms, pretty } from "./dom.js";
import { showDetails } from "./details.js";

const FINAL = new Set(["completed", "failed", "cancelled", "revised"]);
const state = { runId: null, view: null, collapsed: new Set(), selected: null, shown: null,
  stop: null, timer: null, tab: "tree" };

export function closeRun() {
  if (state.stop) state.stop();
  state.stop = null;
  state.runId = null;
}

export async function openRun(runId) {
  if (state.runId !== runId) {
    closeRun();
    Object.assign(state, { runId, view: null, collapsed: new Set(), selected: null });
    clear(document.getElementById("waits"));
    clear(document.getElementById("details")).append(
      el("p", { class: "dim", text: "Select a node to see its details." }));
  }
  await refresh();
  if (!FINAL.has(state.view.status) && !state.stop) startFollowing();
}

function startFollowing() {
  const runId = state.runId;
  document.getElementById("run-live").hidden = false;
  state.stop = follow(runId, (kind) => {
    if (kind === "node_start" || kind === "node_end" || kind === "node_event" || kind === "end") soon();
  }, () => {
    if (state.runId !== runId) return;
    state.stop = null;
    document.getElementById("run-live").hidden = true;
    soon();
  });
}

function soon() {
  // Events come in bursts: one redraw for each burst.
  if (state.timer) return;
  state.timer = setTimeout(() => { state.timer = null; refresh(); }, 60);
}

async function refresh() {
  const runId = state.runId;
  if (!runId) return;
  const view = await api(`/api/runs/${encodeURIComponent(runId)}`);
  if (state.runId !== runId) return;
  state.view = view;
  document.getElementById("run-title").textContent = `${view.name || runId} · ${view.status}`;
  drawTree();
  drawTimeline();
  await drawWaits();
  // The open details are fetched again only when their node has changed.
  const line = view.nodes.find((n) => n.id === state.selected);
  const shown = line ? JSON.stringify([line.status, line.end, line.label, line.children.length]) : null;
  if (line && shown !== state.shown) await select(state.selected, false);
}

// -- tree ---------------------------------------------------------------------------------

function drawTree() {
  const byId = new Map(state.view.nodes.map((n) => [n.id, n]));
  const root = state.view.nodes[0];
  const box = clear(document.getElementById("tree"));
  if (!root) { box.append(el("p", { class: "dim", text: "Starting…" })); return; }
  const branch = (node) => {
    const kids = node.children.map((id) => byId.get(id)).filter(Boolean);
    const collapsed = state.collapsed.has(node.id);
    const toggle = el("button", { type: "button", class: "toggle", title: collapsed ? "expand" : "collapse",
      text: kids.length ? (collapsed ? "▸" : "▾") : "",
      onclick: (event) => { event.stopPropagation(); flip(node.id); } });
    const row = el("div", { class: "row" + (state.selected === node.id ? " selected" : ""),
      dataset: { nodeId: node.id }, onclick: () => select(node.id, true) },
      toggle, el("span", { class: "label" }, labelSpans(node.label)));
    const item = el("li", { class: "node s-" + node.status, dataset: { nodeId: node.id, status: node.status } }, row);
    if (kids.length) item.append(el("ul", { class: "children" + (collapsed ? " collapsed" : "") }, kids.map(branch)));
    return item;
  };
  box.append(el("ul", {}, branch(root)));
}

function flip(nodeId) {
  if (state.collapsed.has(nodeId)) state.collapsed.delete(nodeId);
  else state.collapsed.add(nodeId);
  drawTree();
}

// -- timeline -------------------------------------------------------------------------------

function drawTimeline() {
  const box = clear(document.getElementById("timeline"));
  const nodes = state.view.nodes;
  if (!nodes.length) return;
  const now = Date.now() / 1000 - state.view.started_at;
  const span = Math.max(state.view.span || 0, ...nodes.map((n) => n.end ?? now), 1e-6);
  const depth = new Map();
  for (const n of nodes) depth.set(n.id, n.parent_id ? (depth.get(n.parent_id) ?? 0) + 1 : 0);
  box.append(el("div", { class: "tl-axis" }, el("span", { text: "0" }), el("span", { text: ms(span / 2) }),
    el("span", { text: ms(span) })));
  for (const n of nodes) {
    const end = n.end ?? now;
    const left = (100 * n.start) / span;
    const width = Math.max((100 * (end - n.start)) / span, 0.2);
    box.append(el("div", { class: "tl-row", dataset: { nodeId: n.id }, onclick: () => select(n.id, true),
      title: `${n.type} ${n.name}: ${ms(end - n.start)}` },
      el("div", { class: "tl-name", style: `padding-left:${depth.get(n.id) * 0.8}em` },
        el("span", { class: "s-" + n.status, text: n.label[0][0] + " " }), `${n.type} ${n.name}`),
      el("div", { class: "tl-track" }, el("div", { class: "bar b-" + n.status,
        style: `left:${left}%;width:${Math.min(width, 100 - left)}%`, dataset: { nodeId: n.id } }))));
  }
}

export function showTab(tab) {
  state.tab = tab;
  document.getElementById("tree").hidden = tab !== "tree";
  document.getElementById("timeline").hidden = tab !== "timeline";
  document.getElementById("tab-tree").classList.toggle("active", tab === "tree");
  document.getElementById("tab-timeline").classList.toggle("active", tab === "timeline");
}

// -- details --------------------------------------------------------------------------------

async function select(nodeId, scroll) {
  state.selected = nodeId;
  const line = state.view && state.view.nodes.find((n) => n.id === nodeId);
  state.shown = line ? JSON.stringify([line.status, line.end, line.label, line.children.length]) : null;
  for (const row of document.querySelectorAll("#tree .row")) {
    row.classList.toggle("selected", row.dataset.nodeId === nodeId);
  }
  const runId = state.runId;
  const detail = await api(`/api/runs/${encodeURIComponent(runId)}/nodes/${encodeURIComponent(nodeId)}`);
  if (state.runId !== runId || state.selected !== nodeId) return;
  showDetails(document.getElementById("details"), detail);
  if (scroll) document.getElementById("details").scrollTop = 0;
}

// -- waits ------------------------------------------------------------------------------------

async function drawWaits() {
  const box = document.getElementById("waits");
  let waits = [];
  try {
    waits = (await api(`/api/waits?run_id=${encodeURIComponent(state.runId)}`)).waits;
  } catch { waits = []; }
  // Forms of waits still open stay as they are: a person may be typing in one.
  const open = new Set(waits.map((w) => w.id));
  for (const form of box.querySelectorAll(".wait")) if (!open.has(form.dataset.waitId)) form.remove();
  const shown = new Set([...box.querySelectorAll(".wait")].map((f) => f.dataset.waitId));
  let title = box.querySelector("h3");
  if (!title) { title = el("h3"); box.prepend(title); }
  title.textContent = `Waiting for you (${waits.length})`;
  for (const wait of waits) if (!shown.has(wait.id)) box.append(waitForm(wait));
  box.hidden = waits.length === 0;
}

function waitForm(wait) {
  const problem = el("p", { class: "error" });
  const decide = async (verb, body) => {
    problem.textContent = "";
    try {
      await api(`/api/waits/${encodeURIComponent(wait.id)}/${verb}`, { method: "POST", body });
      soon();
    } catch (e) { problem.textContent = e.message; }
  };
  const request = wait.request || {};
  const item = el("div", { class: "wait", dataset: { waitId: wait.id, kind: wait.kind } });
  if (wait.kind === "approval") {
    const input = el("textarea", { class: "wait-input", rows: 4 }, pretty(request.input ?? {}));
    const reason = el("input", { type: "text", class: "wait-reason", placeholder: "reason (to reject)" });
    item.append(
      el("div", {}, el("strong", { text: "Approve " }), el("code", { text: request.tool || request.name || "the call" }),
        wait.agent ? ` for agent ${wait.agent}` : ""),
      el("label", {}, "input (edit to change it):", input),
      el("button", { type: "button", class: "approve", onclick: () => {
        let edited;
        try { edited = JSON.parse(input.value); } catch { problem.textContent = "the input is not JSON"; return; }
        const same = JSON.stringify(edited) === JSON.stringify(request.input ?? {});
        decide("approve", same ? {} : { input: edited });
      }, text: "Approve" }),
      reason,
      el("button", { type: "button", class: "reject", onclick: () => {
        if (!reason.value.trim()) { problem.textContent = "say why, to reject"; return; }
        decide("reject", { reason: reason.value.trim() });
      }, text: "Reject" }));
  } else {
    const answer = el("textarea", { class: "wait-answer", rows: 2,
      placeholder: request.schema && request.schema.type !== "string" ? "JSON" : "your answer" });
    item.append(
      el("div", {}, el("strong", { text: "Question: " }), request.question || pretty(request)),
      request.schema && request.schema.type !== "string" ? el("pre", { text: pretty(request.schema) }) : null,
      answer,
      el("button", { type: "button", class: "answer", text: "Answer",
        onclick: () => decide("answer", { value: answer.value }) }));
  }
  item.append(problem);
  return item;
}
