// The page's views and their routes: #runs (the list), #run=ID (one run), #new (the form).
import { ApiError, forgetToken, setToken, takeTokenFromUrl, token } from "./api.js";
import { loadRuns, loadWorkflows, setUpForm } from "./runs.js";
import { closeRun, openRun, showTab } from "./run.js";

const VIEWS = ["login", "runs-view", "new-view", "run-view"];
let listTimer = null;

function show(id) {
  for (const view of VIEWS) document.getElementById(view).hidden = view !== id;
}

function failed(error) {
  if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
    forgetToken();
    document.getElementById("login-error").textContent = error.message;
    show("login");
    return;
  }
  console.error(error);
}

async function route() {
  clearInterval(listTimer);
  if (!token()) { show("login"); return; }
  const params = new URLSearchParams(location.hash.slice(1));
  try {
    if (params.get("run")) {
      show("run-view");
      await openRun(params.get("run"));
    } else if (location.hash === "#new") {
      closeRun();
      show("new-view");
      await loadWorkflows();
    } else {
      closeRun();
      show("runs-view");
      await loadRuns();
      listTimer = setInterval(() => loadRuns().catch(failed), 2000);  // runs of other processes
    }
  } catch (error) { failed(error); }
}

takeTokenFromUrl();
setUpForm();
document.getElementById("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setToken(document.getElementById("token-input").value.trim());
  route();
});
document.getElementById("filters").addEventListener("input", () => loadRuns().catch(failed));
document.getElementById("filters").addEventListener("submit", (event) => event.preventDefault());
document.getElementById("tab-tree").addEventListener("click", () => showTab("tree"));
document.getElementById("tab-timeline").addEventListener("click", () => showTab("timeline"));
window.addEventListener("hashchange", route);
route();
