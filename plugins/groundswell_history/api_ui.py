"""The dev UI's routes: the page (``/ui``), its runs API (``/api/runs``) and workflow runs.

- ``GET /ui`` is the page (static HTML, CSS and JS shipped in this package).
- ``GET /api/runs`` lists runs (this process's and the trace folder's),
  newest first, filtered by ``name``, ``status``, ``since`` and ``until``.
- ``GET /api/runs/{run_id}`` is one run's tree, ``GET
  /api/runs/{run_id}/nodes/{node_id}`` one node's details, and ``GET
  /api/runs/{run_id}/events`` follows the run as server-sent events.
- ``GET /api/workflows`` lists the workflows the UI may start, with their
  input schemas; ``POST /api/workflows/{name}/run`` starts one in this process.

Every ``/api`` route needs an operator token (runs hold every agent's work):
no token or a bad one is a 401, an agent's token a 403. The page itself holds
no data; it asks for the token (``groundswell ui`` prints a URL carrying it
after ``#``, which browsers never send to the server).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

import groundswell
from groundswell import ConfigurationError, NodeStatus

from .api_gate import Credentials, Gate
from .api_models import Problem
from .auth import Caller
from .ui_launch import Launcher
from .ui_runs import LiveRuns, Runs, TraceFolder
from .ui_views import node_detail, tree_view

__all__ = ["STATIC", "UI", "add_ui_routes"]

STATIC = Path(__file__).with_name("ui_static")
MAX_RUNS = 500
_STATUSES = tuple(s.value for s in NodeStatus)
_DESCRIPTIONS = {
    401: "no token, or not a valid token",
    403: "an agent's token: the UI's API takes an operator token",
    404: "no such run, node or workflow",
    422: "invalid parameters or body, or inputs that do not fit the workflow (see message)",
}


def _refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": Problem, "description": _DESCRIPTIONS[code]} for code in statuses}


class RunBody(BaseModel):
    """Start a workflow: its arguments, and which API its agents talk to."""

    model_config = ConfigDict(extra="forbid")
    inputs: dict[str, Any] = Field(default_factory=dict, description="the workflow's arguments")
    mode: Literal["fake", "real"] = Field(
        default="fake",
        description='"fake": offline, a FakeAnthropicAPI answers every agent; "real": the '
        "Anthropic API (needs ANTHROPIC_API_KEY where the UI runs)",
    )


class _LivePlugin:
    """Registers the UI's `LiveRuns` as an event sink of this process."""

    def __init__(self, live: LiveRuns) -> None:
        self.live = live

    @groundswell.hookimpl
    def register_event_sinks(self) -> groundswell.EventSink:
        return groundswell.EventSink(
            # One per app: two apps in one process each see every run.
            name=f"ui-live-{id(self.live)}",
            factory=lambda: self.live,
            description="groundswell ui: live runs",
        )


class UI:
    """What the UI routes of one app share: its runs, its launcher, its live sink."""

    def __init__(self, trace_dir: str | os.PathLike[str] | None, workflows: Any) -> None:
        self.live = LiveRuns()
        folder = trace_dir if trace_dir is not None else os.environ.get("GROUNDSWELL_TRACE_DIR")
        self.trace_dir = Path(folder).expanduser() if folder else None
        self.runs = Runs(self.live, TraceFolder(self.trace_dir) if self.trace_dir else None)
        self.launcher = Launcher(workflows, self.live)
        self._plugin: str | None = None

    def start(self) -> None:
        """Receive the events of this process's runs (idempotent)."""
        if self._plugin is None:
            manager = groundswell.get_plugin_manager()
            self._plugin = manager.register(
                _LivePlugin(self.live), name=f"groundswell-ui-{id(self)}"
            )

    def close(self) -> None:
        """Stop receiving them."""
        name, self._plugin = self._plugin, None
        if name is not None:
            groundswell.get_plugin_manager().unregister(name)


def _when(text: str | None, end_of_day: bool) -> float | None:
    """A ``since``/``until`` value as a Unix time; a date alone covers the whole day."""
    if text is None:
        return None
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            moment = dt.datetime.combine(day, dt.time.max if end_of_day else dt.time.min)
        else:
            moment = dt.datetime.fromisoformat(text)
        return moment.timestamp()  # a time without a zone is the server's local time
    except (ValueError, OverflowError, OSError):  # not a date, or one no clock can hold
        raise ConfigurationError(
            f"not a date or time: {text!r} (use 2026-11-28 or 2026-11-28T10:15)"
        ) from None


_KINDS = frozenset({"node_start", "node_end", "node_event"})


def _sse(kind: str, data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def add_ui_routes(
    app: FastAPI,
    gate: Gate,
    *,
    trace_dir: str | os.PathLike[str] | None = None,
    workflows: Any = None,
) -> UI:
    """Add the page and its API to ``app`` (made by ``make_app``); returns their `UI`.

    Runs of this process show once `UI.start` has run (the app's startup does it).
    """
    ui = UI(trace_dir, workflows)
    app.state.ui = ui
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    def operator(request: Request, credentials: Any, record: dict[str, Any]) -> Any:
        caller = gate.caller(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        assert isinstance(caller, Caller)
        if not caller.operator:
            return gate.refuse(
                request,
                403,
                f"this token belongs to agent {caller.name!r}; runs hold every agent's work, "
                "so the UI's API takes an operator token (`groundswell history token --operator`)",
                record,
            )
        return caller

    def answered(request: Request, record: dict[str, Any], content: Any, status: int = 200) -> Any:
        record["status"] = status
        gate.record(request, record)
        return JSONResponse(status_code=status, content=groundswell.redact(content))

    @app.get(
        "/api/runs",
        summary="Runs, newest first (this process's and the trace folder's)",
        responses=_refusals(401, 403, 422),
    )
    def list_runs(
        request: Request,
        name: Annotated[
            str | None, Query(max_length=200, description="only runs whose name holds this")
        ] = None,
        status: Annotated[
            str | None, Query(description=f"only runs in this status ({', '.join(_STATUSES)})")
        ] = None,
        since: Annotated[
            str | None, Query(max_length=40, description="started on or after (ISO date/time)")
        ] = None,
        until: Annotated[
            str | None, Query(max_length=40, description="started on or before (ISO date/time)")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_RUNS)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
        credentials: Credentials = None,
    ) -> Any:
        record: dict[str, Any] = {"query": {"name": name, "status": status}}
        caller = operator(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        if status is not None and status not in _STATUSES:
            return gate.refuse(
                request,
                422,
                f"status must be one of {', '.join(_STATUSES)}, got {status!r}",
                record,
            )
        try:
            start, end = _when(since, False), _when(until, True)
        except ConfigurationError as exc:
            return gate.refuse(request, 422, str(exc), record)
        runs = [
            s
            for s in ui.runs.summaries()
            if (name is None or name.lower() in s.name.lower())
            and (status is None or s.status == status)
            and (start is None or (s.started_at or 0) >= start)
            and (end is None or (s.started_at or 0) <= end)
        ]
        page = runs[offset : offset + limit]
        content = {
            "total": len(runs),
            "count": len(page),
            "trace_dir": str(ui.trace_dir) if ui.trace_dir else None,
            "runs": [s.to_dict() for s in page],
        }
        return answered(request, record, content)

    def found(run_id: str) -> Any:
        got = ui.runs.tree(run_id)
        if got is None and ui.launcher.starting(run_id):
            return {"run_id": run_id, "status": "pending", "source": "live", "nodes": []}
        return got

    @app.get(
        "/api/runs/{run_id}",
        summary="One run's tree: its nodes in pre-order, with labels",
        responses=_refusals(401, 403, 404, 422),
    )
    def get_run(request: Request, run_id: str, credentials: Credentials = None) -> Any:
        record: dict[str, Any] = {"run_id": run_id}
        caller = operator(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        got = found(run_id)
        if got is None:
            return gate.refuse(
                request, 404, f"no run {run_id!r} (GET /api/runs lists them)", record
            )
        view = got if isinstance(got, dict) else tree_view(*got)
        return answered(request, record, view)

    @app.get(
        "/api/runs/{run_id}/nodes/{node_id}",
        summary="One node's details",
        responses=_refusals(401, 403, 404, 422),
    )
    def get_node(
        request: Request, run_id: str, node_id: str, credentials: Credentials = None
    ) -> Any:
        record: dict[str, Any] = {"run_id": run_id, "node_id": node_id}
        caller = operator(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        got = ui.runs.tree(run_id)
        detail = node_detail(got[0], node_id) if got is not None else None
        if detail is None:
            return gate.refuse(request, 404, f"no node {node_id!r} in run {run_id!r}", record)
        return answered(request, record, detail)

    @app.get(
        "/api/runs/{run_id}/events",
        summary="Follow a run: its events so far, then each new one, as server-sent events",
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "the run's events"},
            **_refusals(401, 403, 404, 422),
        },
    )
    async def follow_run(request: Request, run_id: str, credentials: Credentials = None) -> Any:
        record: dict[str, Any] = {"run_id": run_id}
        caller = operator(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        stream = ui.runs.follow(run_id)
        if stream is None:
            return gate.refuse(
                request, 404, f"no run {run_id!r} (GET /api/runs lists them)", record
            )
        record["status"] = 200
        gate.record(request, record)

        async def events(source: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
            yield ": following\n\n"  # headers and a first byte now: the page knows it is on
            async for event in source:
                # A file may hold anything: its kind must not forge an event (or an "end").
                kind = event.get("kind")
                yield _sse(kind if kind in _KINDS else "event", groundswell.redact(event))
            yield _sse("end", {"run_id": run_id})

        return StreamingResponse(
            events(stream),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @app.get(
        "/api/workflows",
        summary="The workflows the UI may start, with their input schemas",
        responses=_refusals(401, 403, 422),
    )
    def list_workflows(request: Request, credentials: Credentials = None) -> Any:
        record: dict[str, Any] = {}
        caller = operator(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        return answered(request, record, {"workflows": ui.launcher.describe()})

    @app.post(
        "/api/workflows/{name}/run",
        summary="Start a workflow in this process, offline (fake) or against the real API",
        status_code=202,
        responses=_refusals(401, 403, 404, 422),
    )
    async def run_workflow(
        request: Request, name: str, body: RunBody, credentials: Credentials = None
    ) -> Any:
        record: dict[str, Any] = {"workflow": name, "mode": body.mode}
        caller = operator(request, credentials, record)
        if isinstance(caller, JSONResponse):
            return caller
        if name not in ui.launcher.workflows:
            known = ", ".join(sorted(ui.launcher.workflows)) or "none (groundswell ui --workflow)"
            return gate.refuse(request, 404, f"no workflow {name!r}; the UI runs: {known}", record)
        ui.start()  # an app used without its startup (a test client outside `with`)
        try:
            run_id = ui.launcher.start(name, body.inputs, body.mode)
        except ConfigurationError as exc:
            return gate.refuse(request, 422, groundswell.scrub(str(exc)), record)
        content = {"run_id": run_id, "workflow": name, "mode": body.mode}
        return answered(request, {**record, "run_id": run_id}, content, 202)

    return ui
