// The runs list (with its filters) and the form that starts a workflow.
import { api } from "./api.js";
import { el, clear, ms, usd, when } from "./dom.js";

const MARKS = { completed: "✓", failed: "✗", cancelled: "⊘", revised: "↺", running: "…",
  pending: "·", waiting: "⧖" };

function query() {
  const params = new URLSearchParams();
  const pairs = { name: "filter-name", status: "filter-status", since: "filter-since", until: "filter-until" };
  for (const [key, id] of Object.entries(pairs)) {
    const value = document.getElementById(id).value.trim();
    if (value) params.set(key, value);
  }
  return params.toString();
}

export async function loadRuns() {
  const q = query();
  const data = await api("/api/runs" + (q ? "?" + q : ""));
  const body = clear(document.querySelector("#runs tbody"));
  for (const run of data.runs) {
    const tokens = run.input_tokens || run.output_tokens
      ? `${run.input_tokens}→${run.output_tokens}` + (run.cache_read_tokens ? ` (${run.cache_read_tokens} cached)` : "")
      : "";
    body.append(el("tr", { class: "run", dataset: { runId: run.run_id },
      onclick: () => { location.hash = "run=" + encodeURIComponent(run.run_id); } },
      el("td", { class: "s-" + run.status, text: MARKS[run.status] || "?" }),
      el("td", { class: "name" }, el("a", { href: "#run=" + encodeURIComponent(run.run_id), text: run.name })),
      el("td", { class: "status s-" + run.status, text: run.status + (run.waiting ? ` (${run.waiting} waiting)` : "") }),
      el("td", { class: "started", text: when(run.started_at) }),
      el("td", { class: "num duration", text: ms(run.duration) }),
      el("td", { class: "num tokens", text: tokens }),
      el("td", { class: "num cost", text: usd(run.cost_usd) }),
      el("td", { class: "dim", text: run.source === "live" ? "this process" : run.file || "trace" })));
  }
  document.getElementById("runs-count").textContent =
    `${data.total} run${data.total === 1 ? "" : "s"}` + (data.trace_dir ? ` · ${data.trace_dir}` : "");
  document.getElementById("runs-empty").hidden = data.runs.length > 0;
}

// -- the workflow form -------------------------------------------------------------------

let workflows = [];

function field(name, schema, required) {
  const type = schema.type || (schema.anyOf ? "json" : "string");
  const title = name + (required ? " *" : "") + (schema.description ? ` — ${schema.description}` : "");
  const id = "wf-field-" + name;
  let input;
  if (type === "boolean") {
    input = el("input", { type: "checkbox", id, name, checked: schema.default === true });
  } else if (type === "integer" || type === "number") {
    input = el("input", { type: "number", id, name, step: type === "integer" ? "1" : "any",
      value: schema.default ?? "" });
  } else if (type === "string" && !schema.enum) {
    input = el("input", { type: "text", id, name, value: schema.default ?? "" });
  } else if (schema.enum) {
    input = el("select", { id, name }, schema.enum.map((v) => el("option", { value: JSON.stringify(v), text: String(v) })));
  } else {
    input = el("textarea", { id, name, placeholder: "JSON", rows: 3 },
      schema.default !== undefined ? JSON.stringify(schema.default) : "");
  }
  input.dataset.kind = schema.enum ? "enum" : type;
  return el("label", {}, el("span", { text: title }), input);
}

function showWorkflow() {
  const name = document.getElementById("workflow-select").value;
  const wf = workflows.find((w) => w.name === name);
  const box = clear(document.getElementById("workflow-fields"));
  document.getElementById("workflow-description").textContent = wf ? wf.description : "";
  if (!wf) return;
  const props = wf.schema.properties || {};
  const required = new Set(wf.schema.required || []);
  for (const [key, schema] of Object.entries(props)) box.append(field(key, schema, required.has(key)));
}

function inputs() {
  const out = {};
  for (const input of document.querySelectorAll("#workflow-fields [name]")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") { out[input.name] = input.checked; continue; }
    const value = input.value;
    if (value === "") continue;
    if (kind === "integer" || kind === "number") out[input.name] = Number(value);
    else if (kind === "string") out[input.name] = value;
    else {
      try { out[input.name] = JSON.parse(value); } catch { out[input.name] = value; }
    }
  }
  return out;
}

export async function loadWorkflows() {
  const data = await api("/api/workflows");
  workflows = data.workflows;
  const select = clear(document.getElementById("workflow-select"));
  for (const wf of workflows) select.append(el("option", { value: wf.name, text: wf.name }));
  document.getElementById("no-workflows").hidden = workflows.length > 0;
  document.getElementById("workflow-form").hidden = workflows.length === 0;
  showWorkflow();
}

export function setUpForm() {
  document.getElementById("workflow-select").addEventListener("change", showWorkflow);
  document.getElementById("workflow-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = document.getElementById("workflow-error");
    error.textContent = "";
    const name = document.getElementById("workflow-select").value;
    const mode = document.querySelector("input[name=mode]:checked").value;
    try {
      const started = await api(`/api/workflows/${encodeURIComponent(name)}/run`,
        { method: "POST", body: { inputs: inputs(), mode } });
      location.hash = "run=" + encodeURIComponent(started.run_id);
    } catch (e) {
      error.textContent = e.message;
    }
  });
}
