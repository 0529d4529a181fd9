// A node's details: prompt, model calls (messages, thinking, tool calls, reply), tokens,
// cost, cache, reflection, budget gauge, error with traceback, and the raw record.
import { el, clear, labelSpans, ms, pretty, usd } from "./dom.js";

function section(title, ...body) {
  return el("section", { class: "d-" + title.toLowerCase().replace(/[^a-z]+/g, "-") }, el("h4", { text: title }), ...body);
}

function kv(pairs) {
  const rows = [];
  for (const [key, value] of pairs) {
    if (value === undefined || value === null || value === "") continue;
    rows.push(el("span", { class: "dim", text: key }), el("span", { class: "mono", text: String(value) }));
  }
  return rows.length ? el("div", { class: "kv" }, rows) : null;
}

function block(item) {
  if (item === null || typeof item !== "object") return el("pre", { text: pretty(item) });
  const kind = item.type || "block";
  let body;
  if (kind === "text") body = el("pre", { text: item.text ?? "" });
  else if (kind === "thinking" || kind === "redacted_thinking") body = el("pre", { class: "thinking", text: item.thinking ?? item.data ?? "(redacted)" });
  else if (kind === "tool_use" || kind === "server_tool_use" || kind === "mcp_tool_use") body = el("div", {}, el("code", { text: item.name }), el("pre", { text: pretty(item.input) }));
  else if (kind === "tool_result") body = el("div", {}, el("code", { text: item.name || item.tool_use_id || "" }),
    item.is_error ? el("span", { class: "error", text: " error" }) : null, el("pre", { text: pretty(item.content) }));
  else body = el("pre", { text: pretty(item) });
  return el("div", { class: "block block-" + kind }, el("div", { class: "block-kind", text: kind.replace(/_/g, " ") }), body);
}

function message(msg) {
  if (msg.role === "note") return el("p", { class: "dim", text: `${msg.earlier} earlier message(s) of the conversation (not recorded in the trace)` });
  const content = typeof msg.content === "string" ? [{ type: "text", text: msg.content }] : msg.content || [];
  return el("div", { class: "msg role-" + msg.role }, el("strong", { text: msg.role }), content.map(block));
}

function gauge(budget) {
  if (!budget.limit) return kv(Object.entries(budget.stats || {}));
  const share = budget.share;
  const note = { ok: "", warning: " ⚠ near the limit", over: " ⚠ over the limit" }[budget.state];
  return el("div", {},
    el("div", { class: `gauge state-${budget.state}`, title: `${Math.round(share * 100)}%`, dataset: { state: budget.state } },
      el("div", { class: "fill", style: `width:${Math.min(share, 1) * 100}%` }),
      el("div", { class: "mark", style: `left:${budget.threshold * 100}%` })),
    el("p", { class: "budget-text " + (budget.state === "ok" ? "" : "error"),
      text: `${Math.round(share * 100)}% (${budget.peak.toLocaleString()}/${budget.limit.toLocaleString()} tok), warning at ${Math.round(budget.threshold * 100)}%${note}` }));
}

export function showDetails(box, d) {
  const node = d.node;
  const usage = d.usage || {};
  clear(box).append(
    el("h3", {}, labelSpans(d.label)),
    el("p", { class: "dim mono", text: d.path.join(" › ") }),
    kv([["type", node.type], ["status", node.status], ["id", node.id],
      ["duration", node.metrics && node.metrics.duration !== undefined ? ms(node.metrics.duration) : null]]));
  if (d.error) {
    box.append(section("Error", el("p", { class: "error", text: `${d.error.type || "error"}: ${d.error.message || ""}` }),
      d.error.formatted ? el("pre", { class: "traceback", text: d.error.formatted }) : null));
  }
  if (d.usage || d.cost_usd !== undefined && d.cost_usd !== null || d.cache) {
    box.append(section("Tokens and cost", kv([
      ["input tokens", usage.input_tokens], ["output tokens", usage.output_tokens],
      ["prompt-cache reads", usage.cache_read_input_tokens], ["prompt-cache writes", usage.cache_creation_input_tokens],
      ["cost", d.cost_usd === null ? "unknown price" : usd(d.cost_usd)],
      ["answer cache", d.cache === "hit" ? "⚡ cache hit" : d.cache],
    ])));
  }
  if (d.cache_events && d.cache_events.length) box.append(section("Cache events", el("pre", { text: pretty(d.cache_events) })));
  if (d.budget) box.append(section("Budget", gauge(d.budget)));
  if (d.reflection) {
    const r = d.reflection;
    box.append(section("Reflection", kv([["attempt", r.attempt]]),
      r.revised.map((x) => el("p", { class: "s-revised", text: `↺ revised: ${x.name} (attempt ${x.attempt ?? "?"})` })),
      r.reflections.map((x) => el("div", {}, el("strong", { text: `${x.name} (${x.status})` }), el("pre", { text: pretty(x.payload) })))));
  }
  if (d.prompt) {
    box.append(section("Prompt", kv([["agent", d.prompt.agent], ["model", d.prompt.model]]),
      d.prompt.system ? el("div", {}, el("div", { class: "block-kind", text: "system prompt" }), el("pre", { class: "system", text: pretty(d.prompt.system) })) : null,
      d.prompt.user !== undefined && d.prompt.user !== null ? el("div", {}, el("div", { class: "block-kind", text: "user" }), el("pre", { class: "user", text: pretty(d.prompt.user) })) : null,
      node.type === "prompt" && d.prompt.output !== undefined && d.prompt.output !== null ? el("div", {}, el("div", { class: "block-kind", text: "output" }), el("pre", { text: pretty(d.prompt.output) })) : null));
  }
  if (d.model_calls && d.model_calls.length) {
    box.append(section("Model calls", d.model_calls.map((c) => el("p", { class: "mono" },
      el("span", { class: "s-" + c.status, text: c.name }),
      c.usage ? `  ${c.usage.input_tokens}→${c.usage.output_tokens} tok` : "", c.cost_usd ? "  " + usd(c.cost_usd) : ""))));
  }
  if (d.model_call) {
    const m = d.model_call;
    box.append(section("Request", kv(Object.entries(m.request || {}).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : v]))),
      section("Messages", m.messages.map(message)),
      m.thinking.length ? section("Thinking", m.thinking.map(block)) : null,
      section("Reply", kv([["stop reason", m.reply.stop_reason], ["id", m.reply.id]]), (m.reply.content || []).map(block)));
  }
  if (d.tool) {
    box.append(section("Tool call", el("div", { class: "block-kind", text: "input" }), el("pre", { class: "tool-input", text: pretty(d.tool.input) }),
      el("div", { class: "block-kind", text: d.tool.is_error ? "result (error)" : "result" }), el("pre", { class: "tool-output", text: pretty(d.tool.output) })));
  }
  if (node.events && node.events.length) box.append(section("Events", el("pre", { text: pretty(node.events) })));
  box.append(el("details", { class: "raw" }, el("summary", { text: "raw record" }),
    el("pre", { text: pretty({ payload: node.payload, metrics: node.metrics, error: node.error }) })));
}
