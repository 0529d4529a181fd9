"""Starting workflows from the dev UI's form, in the UI's own process.

A workflow is offered by name (``groundswell ui --workflow module:name``, or
``workflows=`` of `groundswell_history.ui_app`); the form is built from
`Workflow.input_schema`, and its values are checked with
`Workflow.validate_input` before anything runs. ``mode="fake"`` puts every
agent of the run on a fresh `groundswell.testing.FakeAnthropicAPI` (offline;
it answers from each request's schema), ``mode="real"`` on the Anthropic API.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from groundswell import ConfigurationError, Workflow, WorkflowError, override_agents_here

from .ui_runs import LiveRuns

__all__ = ["Launcher", "load_workflow"]


def load_workflow(target: str) -> Workflow[Any, Any]:
    """The workflow ``module:name`` or ``path/to/file.py:name`` names."""
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise ConfigurationError(
            f"--workflow expects module:name or file.py:name, got {target!r} "
            "(e.g. myapp.flows:review)"
        )
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where).resolve()
            if not path.is_file():
                raise ConfigurationError(f"--workflow {target}: no such file {where}")
            spec = importlib.util.spec_from_file_location(f"_groundswell_ui_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ConfigurationError(f"--workflow {target}: cannot load {where}")
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, str(path.parent))
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except ConfigurationError:
        raise
    except Exception as exc:  # the module itself is broken: say how
        raise ConfigurationError(
            f"--workflow {target}: cannot import {where}: {type(exc).__name__}: {exc}"
        ) from exc
    found = getattr(module, attr, None)
    if not isinstance(found, Workflow):
        raise ConfigurationError(
            f"--workflow {target}: {attr!r} in {where} is "
            f"{'missing' if found is None else type(found).__name__}, not a Workflow "
            "(decorate an async def with @workflow)"
        )
    return found


def _by_name(workflows: Any) -> dict[str, Workflow[Any, Any]]:
    if workflows is None:
        return {}
    if isinstance(workflows, Workflow):
        workflows = [workflows]
    items: Iterable[Any] = workflows.values() if isinstance(workflows, Mapping) else workflows
    chosen: dict[str, Workflow[Any, Any]] = {}
    for item in items:
        wf = load_workflow(item) if isinstance(item, str) else item
        if not isinstance(wf, Workflow):
            raise ConfigurationError(
                f"workflows= takes Workflow objects or 'module:name' strings, got "
                f"{type(item).__name__}"
            )
        if wf.name in chosen and chosen[wf.name] is not wf:
            raise ConfigurationError(f"two workflows are named {wf.name!r}; rename one")
        chosen[wf.name] = wf
    return chosen


def _client(mode: str) -> Any:
    if mode == "fake":
        from groundswell.testing import FakeAnthropicAPI

        return FakeAnthropicAPI().client()
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise ConfigurationError(
            'mode "real" needs ANTHROPIC_API_KEY set where the UI runs; '
            'set it and restart, or run with mode "fake" (offline)'
        )
    import anthropic

    return anthropic.AsyncAnthropic()


class Launcher:
    """Runs the offered workflows as tasks of the server's event loop."""

    def __init__(self, workflows: Any, live: LiveRuns) -> None:
        self.workflows = _by_name(workflows)
        self.live = live
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def describe(self) -> list[dict[str, Any]]:
        """Each workflow's name, description and input schema (the form's fields)."""
        return [
            {
                "name": name,
                "description": (wf.executor.__doc__ or "").strip(),
                "schema": wf.input_schema(),
            }
            for name, wf in sorted(self.workflows.items())
        ]

    def starting(self, run_id: str) -> bool:
        """Whether ``run_id`` was started here (its first event may not have arrived yet)."""
        return run_id in self._tasks

    def start(self, name: str, inputs: dict[str, Any], mode: str) -> str:
        """Check ``inputs``, start the run, and return its run id (its root node's id)."""
        wf = self.workflows[name]
        kwargs = wf.validate_input(inputs)
        client = _client(mode)
        run_id = os.urandom(8).hex()

        async def go() -> None:
            # A failure is in the run's tree, which is what the UI shows.
            with override_agents_here(client), contextlib.suppress(WorkflowError):
                await wf.execute((), kwargs, run_id=run_id)

        self.live.expect(run_id)
        task = asyncio.get_running_loop().create_task(go(), name=f"groundswell-ui-{name}")
        self._tasks[run_id] = task
        task.add_done_callback(lambda _: self._forget_done())
        return run_id

    def _forget_done(self) -> None:
        # Keep the ids of finished runs (for `starting`) only while few have piled up.
        if len(self._tasks) > 1000:
            for run_id in [k for k, t in self._tasks.items() if t.done()][:500]:
                del self._tasks[run_id]
