"""The dev UI in a real headless Chromium (selenium + chromedriver): the runs list, a run's
tree (expand and collapse), a model call's messages, tokens and cost, a failed step's error,
the timeline, a live run's nodes appearing, a wait approved and a question answered from the
page, and a secret of the environment shown nowhere.

Each test saves a PNG of every view it checks into ``GROUNDSWELL_TEST_ARTIFACTS`` (default
``test-artifacts/ui/`` in the repository). With ``GROUNDSWELL_UI_SCREENSHOTS_TO=docs/images``
the views docs/ui.md shows are saved there too (``ui-*.png``): regenerating them is one run
of this file."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from groundswell_history import serve_app, serving
from groundswell_history.auth import issue_operator_token
from groundswell_jsonl import JsonlSink

import groundswell
from groundswell import Agent, Tool, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, text, tool_use

from .conftest import service_unavailable
from .test_history_api import SECRET
from .test_ui_api import KEY, forecast, interview, parse, weather_agent

pytestmark = pytest.mark.usefixtures("no_wait_left_open")
WAIT_S = 15
ROOT = Path(__file__).resolve().parents[1]
# Resolved now: the `site` fixture changes the working directory.
ARTIFACTS = Path(os.environ.get("GROUNDSWELL_TEST_ARTIFACTS") or ROOT / "test-artifacts" / "ui")
ARTIFACTS = ARTIFACTS.resolve()
DOCS_TO = os.environ.get("GROUNDSWELL_UI_SCREENSHOTS_TO")
DOCS_DIR = Path(DOCS_TO).resolve() if DOCS_TO else None
# The views docs/ui.md shows, and the names it gives them.
DOCS_SHOTS = {
    "runs-list": "ui-runs-list.png",
    "node-details": "ui-run-tree.png",
    "timeline": "ui-timeline.png",
    "live-run": "ui-wait-form.png",
}
PNG = b"\x89PNG\r\n\x1a\n"
SERVICE_TOKEN = "tok_live_abcdef1234567890"


def restart(service: str) -> str:
    """Restart a service."""
    return f"{service} restarted"


@workflow(name="deploy")
async def deploy(ctx: WorkflowContext, service: str) -> str:
    fake = FakeAnthropicAPI([tool_use("restart", {"service": service}), text("Restarted.")])
    agent = Agent(
        name="operator",
        tools=[Tool(restart, requires_approval=True)],
        client=fake.client(),
    )
    await ctx.step("check", lambda: f"{service} is up")
    return str(await ctx.step("restart", lambda: agent.prompt(f"Restart {service}")))


def book(city: str) -> str:
    raise ValueError(f"no rooms left in {city}")


@workflow(name="trip")
async def trip(ctx: WorkflowContext, city: str) -> str:
    """Checks the weather (a tool call), then fails to book a room."""
    fake = FakeAnthropicAPI([tool_use("lookup", {"city": city}), text(f"It is sunny in {city}.")])
    agent = weather_agent(fake)
    await ctx.step("ask", lambda: agent.prompt(f"Weather in {city}?"))
    return await ctx.step("book", lambda: book(city))


def account(name: str) -> str:
    """An account's plan, from the billing service."""
    return f"{name}: plan pro (service token {os.environ['MY_SERVICE_TOKEN']})"


def charge(name: str) -> None:
    token = os.environ["MY_SERVICE_TOKEN"]
    raise PermissionError(f"the billing service refused token {token} for {name}")


@workflow(name="billing")
async def billing(ctx: WorkflowContext, name: str) -> None:
    """Its tool result, system prompt, reply and error all hold a secret of the environment."""
    token = os.environ["MY_SERVICE_TOKEN"]
    fake = FakeAnthropicAPI([tool_use("account", {"name": name}), text(f"Token {token}.")])
    clerk = Agent(
        name="clerk",
        system=f"Call the billing service with token {token}.",
        tools=[account],
        client=fake.client(),
    )
    await ctx.step("look-up", lambda: clerk.prompt(f"Which plan is {name} on?"))
    await ctx.step("charge", lambda: charge(name))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        service_unavailable("chromium or chromedriver is not installed (apt: chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        service_unavailable("selenium is not installed (pip install -e '.[dev]')")
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,1000")
    driver = webdriver.Chrome(service=Service(str(driver_path)), options=options)
    # The page's own size (the window's is larger by its frame): the screenshots' size.
    viewport = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", viewport)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def site(
    tmp_path: Path, add_sink: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The UI over a trace folder of real runs; its URL with an operator token."""
    monkeypatch.chdir(
        tmp_path
    )  # a relative trace folder: the page (and a screenshot) says "traces"
    traces = Path("traces")
    add_sink(JsonlSink(traces), "ui-browser-jsonl")
    forecast.run_sync("Paris")
    forecast.run_sync("Oslo")
    with pytest.raises(groundswell.WorkflowError):
        parse.run_sync("ten dollars")
    with pytest.raises(groundswell.WorkflowError):
        trip.run_sync("Lyon")
    assert groundswell.flush_sinks()
    app = serve_app(trace_dir=traces, workflows=[interview, deploy], secret=SECRET)
    with serving(app, port=0) as server:
        yield f"{server.url}/ui/#token={issue_operator_token('ada', SECRET)}"


def shot(browser: Any, view: str, element: Any = None) -> Path:
    """Save a PNG of ``view`` (the page, or one ``element`` of it) as a test artefact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{view}.png"
    path.unlink(missing_ok=True)  # no stale file passes for this run's
    png: bytes = (
        element.screenshot_as_png if element is not None else browser.get_screenshot_as_png()
    )
    path.write_bytes(png)
    assert path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG, path
    if DOCS_DIR is not None and view in DOCS_SHOTS:
        DOCS_DIR.mkdir(parents=True, exist_ok=True)
        (DOCS_DIR / DOCS_SHOTS[view]).write_bytes(png)
    return path


def until(browser: Any, check: Callable[[], Any], what: str) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def attempt(_: Any) -> Any:
        try:
            return check()
        except StaleElementReferenceException:  # the page redrew it meanwhile
            return False

    return WebDriverWait(browser, WAIT_S, poll_frequency=0.05).until(attempt, message=what)


def click(element: Any) -> bool:
    """Click ``element`` (inside `until`: the runs list redraws itself every 2 s)."""
    element.click()
    return True


def open_run(browser: Any, name: str) -> None:
    """Open the newest run named ``name`` from the runs list."""

    def found() -> bool:
        links = [a for a in css(browser, "tr.run .name a") if a.text == name]
        return bool(links) and click(links[0])

    until(browser, found, f"the run {name} listed")
    until(browser, lambda: rows(browser) and f"workflow {name}" in rows(browser)[0], "its tree")


def open_waiting_run(browser: Any) -> None:
    """Open the run the list shows as waiting, once it does."""

    def waiting() -> bool:
        found = [r for r in css(browser, "tr.run") if r.text.startswith("⧖")]
        return bool(found) and click(found[0])

    until(browser, waiting, "a run listed as waiting")


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    found: list[Any] = browser.find_elements(By.CSS_SELECTOR, selector)
    return found


def rows(browser: Any) -> list[str]:
    """The tree's rows as text, read at once (a live run's page redraws its tree)."""
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#tree .row')].map((r) => r.textContent)"
    )
    return found


def row_of(browser: Any, name: str) -> Any:
    """The tree row of the (last) node named ``name``."""
    # textContent: selenium's .text is empty for a row hidden in a collapsed branch.
    found = [r for r in css(browser, "#tree .row") if f" {name}" in r.get_attribute("textContent")]
    return found[-1] if found else None


def details(browser: Any, section: str = "") -> str:
    """The text of the details panel, or of one of its sections (``tokens-and-cost``)."""
    found = css(browser, f"#details .d-{section}" if section else "#details")
    return str(found[0].text) if found else ""


def test_the_runs_list_a_runs_tree_and_a_model_calls_details(browser: Any, site: str) -> None:
    browser.get(site)
    until(browser, lambda: len(css(browser, "tr.run")) == 4, "the four runs listed")
    assert "token" not in browser.current_url  # taken off the address bar
    names = [r.find_element("css selector", ".name").text for r in css(browser, "tr.run")]
    assert names == ["trip", "parse", "forecast", "forecast"]
    statuses = [r.find_element("css selector", ".status").text for r in css(browser, "tr.run")]
    assert statuses == ["failed", "failed", "completed", "completed"]
    assert css(browser, "tr.run .cost")[2].text.startswith("$")
    assert "4 runs · traces" in css(browser, "#runs-count")[0].text
    shot(browser, "runs-list")

    css(browser, "#filter-name")[0].send_keys("pars")
    until(browser, lambda: len(css(browser, "tr.run")) == 1, "the list filtered by name")
    css(browser, "#filter-name")[0].clear()
    css(browser, "#filter-name")[0].send_keys("fore")
    until(browser, lambda: len(css(browser, "tr.run")) == 2, "the forecasts")

    until(browser, lambda: click(css(browser, "tr.run .name a")[0]), "")  # the newest: Oslo
    until(browser, lambda: len(css(browser, "#tree .row")) == 6, "the run's tree")
    lines = [r.text for r in css(browser, "#tree .row")]
    assert lines[0].startswith("▾✓ workflow forecast")
    assert "tool_call lookup" in lines[4]

    prompt = css(browser, "#tree li.node")[2]
    prompt.find_element("css selector", ".toggle").click()
    until(browser, lambda: not row_of(browser, "lookup").is_displayed(), "the prompt collapsed")
    assert row_of(browser, "forecaster").is_displayed()
    css(browser, "#tree li.node")[2].find_element("css selector", ".toggle").click()
    until(browser, lambda: row_of(browser, "lookup").is_displayed(), "the prompt expanded")
    assert all(row.is_displayed() for row in css(browser, "#tree .row"))
    shot(browser, "run-tree")

    css(browser, "#tree .row")[5].click()  # the second model call
    until(browser, lambda: "MESSAGES" in details(browser), "its details")
    messages = details(browser, "messages")
    assert messages.index("Weather in Oslo?") < messages.index("sunny in Oslo")  # the tool result
    assert "It is sunny in Oslo." in details(browser, "reply")
    assert "You report the weather. Key: **********" in details(browser)
    assert KEY not in browser.page_source
    spent = details(browser, "tokens-and-cost").splitlines()
    assert int(spent[spent.index("input tokens") + 1]) > 0
    assert int(spent[spent.index("output tokens") + 1]) > 0
    assert spent[spent.index("cost") + 1].startswith("$")
    shot(browser, "node-details")

    css(browser, "#tree .row")[2].click()  # the prompt: its budget gauge
    until(browser, lambda: css(browser, ".gauge"), "the budget gauge")
    assert css(browser, ".gauge")[0].get_attribute("data-state") == "warning"

    css(browser, "#tab-timeline")[0].click()
    until(browser, lambda: len(css(browser, "#timeline .bar")) == 6, "the timeline")
    assert not css(browser, "#tree")[0].is_displayed()
    names = [r.text for r in css(browser, "#timeline .tl-name")]
    assert names[4] == "✓ tool_call lookup"
    bars = css(browser, "#timeline .bar")
    assert bars[0].size["width"] >= max(b.size["width"] for b in bars)  # the run spans them all
    shot(browser, "timeline")


def test_a_run_with_a_tool_call_and_a_failed_step_shows_the_error(browser: Any, site: str) -> None:
    browser.get(site)
    open_run(browser, "trip")
    lines = rows(browser)
    assert lines[0].startswith("▾✗ workflow trip")
    assert any("✓ tool_call lookup" in r for r in lines)
    (failed,) = [r for r in lines if "step book" in r]
    assert failed.startswith("✗") and "ValueError" in failed

    row_of(browser, "book").click()
    until(browser, lambda: "ERROR" in details(browser), "the failed step's details")
    error = details(browser, "error")
    assert "ValueError: no rooms left in Lyon" in error
    assert "Traceback (most recent call last):" in error
    assert "raise ValueError" in error
    assert css(browser, "#tree li.node[data-status=failed]")  # drawn as failed
    shot(browser, "failed-step")


def test_a_live_run_grows_on_the_page_and_its_approval_is_given_there(
    browser: Any, site: str
) -> None:
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(r=deploy.run_sync("api")))
    worker.start()
    try:
        browser.get(site)
        open_waiting_run(browser)
        until(browser, lambda: css(browser, ".wait[data-kind=approval]"), "the approval")
        until(browser, lambda: any("⧖ wait approval" in r for r in rows(browser)), "its node")
        waiting = rows(browser)
        assert any("… tool_call restart" in r and "running" in r for r in waiting)
        assert len([r for r in waiting if "model_call" in r]) == 1
        assert "restart" in css(browser, ".wait")[0].text
        assert css(browser, "#run-live")[0].is_displayed()
        shot(browser, "live-run")
        shot(browser, "wait-form", css(browser, "#waits")[0])

        edited = css(browser, ".wait .wait-input")[0]
        edited.clear()
        edited.send_keys('{"service": "web"}')  # approved with another input
        css(browser, ".wait .approve")[0].click()
        # No reload: the tool call and the last model call appear as they happen.
        until(
            browser,
            lambda: any("✓ tool_call restart" in r for r in rows(browser)),
            "the approved tool call on the page",
        )
        until(
            browser,
            lambda: rows(browser)[0].startswith("▾✓ workflow deploy"),
            "the run completed on the page",
        )
        until(browser, lambda: not css(browser, "#waits")[0].is_displayed(), "no waits left")
        assert len([r for r in rows(browser) if "✓ model_call" in r]) == 2
        assert not css(browser, "#run-live")[0].is_displayed()  # no longer following
        shot(browser, "live-run-completed")
    finally:
        for wait in groundswell.waits.pending():  # a failed test leaves no run behind
            if wait.request.get("agent") == "operator":
                groundswell.waits.reject(wait.id, "the test failed")
        worker.join(WAIT_S)
    assert outcome["r"].output == "Restarted."
    (call,) = outcome["r"].tree.find(type="tool_call")
    assert call.payload["output"] == "web restarted"


def test_a_call_is_rejected_from_the_page_with_a_reason(browser: Any, site: str) -> None:
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(r=deploy.run_sync("db")))
    worker.start()
    try:
        browser.get(site)
        open_waiting_run(browser)
        until(browser, lambda: css(browser, ".wait[data-kind=approval]"), "the approval")
        css(browser, ".wait .reject")[0].click()
        until(browser, lambda: "say why" in css(browser, ".wait .error")[0].text, "no reason")
        css(browser, ".wait .wait-reason")[0].send_keys("not during business hours")
        shot(browser, "wait-form-rejecting", css(browser, "#waits")[0])
        css(browser, ".wait .reject")[0].click()
        until(browser, lambda: rows(browser)[0].startswith("▾✓ workflow deploy"), "completed")
    finally:
        for wait in groundswell.waits.pending():
            if wait.request.get("agent") == "operator":
                groundswell.waits.reject(wait.id, "the test failed")
        worker.join(WAIT_S)
    (call,) = outcome["r"].tree.find(type="tool_call")
    assert call.payload["is_error"] is True
    assert "not during business hours" in str(call.payload["output"])


def test_a_workflow_is_started_from_the_form_and_its_question_answered(
    browser: Any, site: str
) -> None:
    from selenium.webdriver.support.ui import Select

    browser.get(site)
    until(browser, lambda: css(browser, "tr.run"), "the runs list")
    css(browser, "#nav-new")[0].click()
    until(browser, lambda: css(browser, "#wf-field-service"), "the first workflow's form")
    Select(css(browser, "#workflow-select")[0]).select_by_visible_text("interview")
    until(browser, lambda: css(browser, "#wf-field-topic"), "the form, from the signature")
    assert css(browser, "#wf-field-rounds")[0].get_attribute("value") == "1"
    css(browser, "#workflow-run")[0].click()
    until(browser, lambda: "topic" in css(browser, "#workflow-error")[0].text, "a missing topic")
    css(browser, "#wf-field-topic")[0].send_keys("tea")
    shot(browser, "workflow-form")
    css(browser, "#workflow-run")[0].click()
    until(browser, lambda: css(browser, ".wait[data-kind=question]"), "the question")
    assert "What do you think of tea?" in css(browser, ".wait")[0].text
    shot(browser, "question-form", css(browser, "#waits")[0])
    css(browser, ".wait .wait-answer")[0].send_keys("lovely")
    css(browser, ".wait .answer")[0].click()
    until(browser, lambda: rows(browser)[0].startswith("▾✓ workflow interview"), "completed")
    assert row_of(browser, "summer") is not None


def test_a_secret_of_the_environment_reaches_neither_the_api_nor_the_page(
    browser: Any, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", SERVICE_TOKEN)
    with pytest.raises(groundswell.WorkflowError) as failed:
        billing.run_sync("acme")  # in the UI's process: its events reach the UI live
    result = failed.value.result
    assert result is not None and result.tree.root is not None
    # The run itself held the secret: in a tool result, a system prompt, a reply, an error.
    (call,) = result.tree.find(type="tool_call")
    assert SERVICE_TOKEN in str(call.payload["output"])
    assert groundswell.flush_sinks()

    run_id = result.tree.root.id
    base, _, token = site.partition("/ui/#token=")
    answers: list[str] = []
    with httpx2.Client(
        base_url=base, timeout=10, headers={"Authorization": f"Bearer {token}"}
    ) as api:
        answers.append(api.get("/api/runs").text)
        view = api.get(f"/api/runs/{run_id}")
        assert view.status_code == 200 and view.json()["status"] == "failed"
        answers.append(view.text)
        ids = [node["id"] for node in view.json()["nodes"]]
        assert len(ids) == 7
        for node_id in ids:
            answers.append(api.get(f"/api/runs/{run_id}/nodes/{node_id}").text)
        with api.stream("GET", f"/api/runs/{run_id}/events") as events:
            answers.append(events.read().decode())
    assert not [a for a in answers if SERVICE_TOKEN in a]
    shown = "".join(answers)
    assert "service token **********" in shown  # the tool result, with the value taken out
    assert "refused token ********** for acme" in shown  # the error

    browser.get(site)
    open_run(browser, "billing")
    for node_id in ids:
        css(browser, f'#tree .row[data-node-id="{node_id}"]')[0].click()
        until(browser, lambda n=node_id: n in details(browser), f"the details of {node_id}")
        assert SERVICE_TOKEN not in browser.page_source
    assert "refused token ********** for acme" in details(browser, "error")
    css(browser, "#tab-timeline")[0].click()
    until(browser, lambda: len(css(browser, "#timeline .bar")) == 7, "the timeline")
    assert SERVICE_TOKEN not in browser.page_source
    shot(browser, "secret-scrubbed")
