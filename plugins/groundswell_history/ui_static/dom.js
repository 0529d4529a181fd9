// Small DOM helpers. Text always goes in as text (never as HTML): run data may hold anything.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

export function ms(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 1) return (seconds * 1000).toFixed(1) + "ms";
  if (seconds < 120) return seconds.toFixed(2) + "s";
  return Math.floor(seconds / 60) + "m " + Math.round(seconds % 60) + "s";
}

export function usd(amount) {
  if (amount === null || amount === undefined) return "";
  if (amount >= 100) return "$" + amount.toFixed(2);
  return amount >= 0.01 || amount === 0 ? "$" + amount.toFixed(4) : "$" + amount.toFixed(6);
}

export function when(unix) {
  return unix ? new Date(unix * 1000).toLocaleString() : "";
}

export function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

// A label from the server ([text, rich style] pieces, as render() draws them) as spans,
// with render()'s own separators: one space inside "mark type name", two before the rest.
export function labelSpans(parts) {
  const out = [];
  parts.forEach(([text, style], i) => {
    if (i) out.push(document.createTextNode(i < 3 ? " " : "  "));
    out.push(el("span", { class: style.split(" ").map((s) => "st-" + s).join(" ") + " st-" + style.replace(/ /g, "-"), text }));
  });
  return out;
}
