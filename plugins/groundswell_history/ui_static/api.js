// The UI's calls to its server: the token, JSON requests, and following a run's events.
// The token stays in this tab (sessionStorage) and travels only in the Authorization header.

const KEY = "groundswell-ui-token";

export function takeTokenFromUrl() {
  // `groundswell ui` prints .../ui/#token=...: the fragment never reaches the server or its logs.
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) {
    sessionStorage.setItem(KEY, token);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "#" + rest : ""));
  }
}

export function token() { return sessionStorage.getItem(KEY); }
export function setToken(value) { sessionStorage.setItem(KEY, value); }
export function forgetToken() { sessionStorage.removeItem(KEY); }

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export async function api(path, options = {}) {
  const headers = { Authorization: "Bearer " + (token() || ""), ...(options.headers || {}) };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { message: text }; }
  if (!response.ok) {
    const message = (data && (data.message || data.detail)) || response.statusText;
    throw new ApiError(response.status, typeof message === "string" ? message : JSON.stringify(message));
  }
  return data;
}

// Server-sent events over fetch (EventSource cannot send the Authorization header).
// Calls onEvent(kind, data) for each event; returns a function that stops following.
export function follow(runId, onEvent, onDone) {
  const controller = new AbortController();
  (async () => {
    try {
      const response = await fetch(`/api/runs/${encodeURIComponent(runId)}/events`, {
        headers: { Authorization: "Bearer " + (token() || ""), Accept: "text/event-stream" },
        signal: controller.signal,
      });
      if (!response.ok || !response.body) return;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const chunk = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let kind = "message";
          const data = [];
          for (const line of chunk.split("\n")) {
            if (line.startsWith("event:")) kind = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
          }
          if (data.length) onEvent(kind, JSON.parse(data.join("\n")));
        }
      }
    } catch (error) {
      if (error.name !== "AbortError") console.warn("following the run stopped:", error);
    } finally {
      if (onDone) onDone();
    }
  })();
  return () => controller.abort();
}
