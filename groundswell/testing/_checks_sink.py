"""The event sink checker: a sink on the hub, given the events of real runs."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from typing import Any

from ..agent import Agent
from ..cache.guard import shown
from ..errors import WorkflowError
from ..hookspecs import EventSink, hookimpl
from ..plugins.manager import flush_sinks, get_plugin_manager
from ..tree.events import Event, sink_problems
from ..workflow.workflow import WorkflowContext, workflow
from ._checks import (
    CALL_TIMEOUT_S,
    Findings,
    discard,
    error,
    fail,
    object_to_check,
    subject,
    tool_then_answer,
    unique,
)
from ._fake import FakeAnthropicAPI

__all__ = ["check_sink"]


class _SinkProbe:
    """Stands in for the sink in the hub, passing every call on and noting what went wrong."""

    def __init__(self, sink: Any, findings: Findings, said: set[str]) -> None:
        self.sink, self.findings = sink, findings
        self.said = said  # what was already reported, as "name" or "name|kind|error"
        self.handled = 0
        self.closed = 0
        self.close_done = threading.Event()

    def _call(self, name: str, *args: Any) -> None:
        method = getattr(self.sink, name, None)
        if not callable(method):
            return
        try:
            result = method(*args)
        except BaseException as exc:  # SystemExit too: the hub would swallow it silently
            event = args[0] if args else None
            said = f"{name}|{event.kind if event else ''}|{error(exc)}"
            if said not in self.said:  # once per error and kind of event, not per node
                self.said.add(said)
                on = (
                    f" on a {event.kind} event (first of a {event.node.type.value})"
                    if event
                    else ""
                )
                self.findings.add(f"{name}() raised {error(exc)}{on}; a sink must take every event")
            return
        if inspect.isawaitable(result):
            discard(result)
            if name not in self.said:
                self.said.add(name)
                self.findings.add(
                    f"{name}() returned {shown(result)}, which nothing awaits; make it a plain "
                    "def that does its work before returning (it runs on its own worker thread)"
                )

    def handle(self, event: Event) -> None:
        self.handled += 1
        self._call("handle", event)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self.closed += 1
        try:
            self._call("close")
        finally:
            self.close_done.set()


async def check_sink(sink: Any) -> None:
    """Check an event sink against `groundswell.tree.events.Sink`; raise `ProtocolViolation`.

    ``sink`` is the sink, its factory (a class or a function called with no
    arguments) or its `EventSink` record. It is attached to the process's sink
    hub under a name of its own, gets every event of real runs (an agent with a
    tool, a failing workflow, two runs at once), is flushed with
    `groundswell.flush_sinks`, then detached, which closes it, as at exit.
    """
    findings = Findings(subject(sink), "event sink")
    made, _ = object_to_check(sink, EventSink, "event sink", "handle", findings)
    if made is None:
        raise findings.stop(
            "its factory returned None, which means the sink is off in this process; configure "
            "it (its environment variables) before checking it"
        )
    findings.subject = subject(made)
    said: set[str] = set()
    for problem in sink_problems(made):
        findings.add(problem)
        said.add(problem.split("()", 1)[0])  # "handle() is async": no second word on it
    if getattr(made, "close", None) is None:
        findings.add("it has no close() method; add one, even one that does nothing")
    probe = _SinkProbe(made, findings, said)
    name = unique("check-sink-")

    class Attach:
        @hookimpl
        def register_event_sinks(self) -> EventSink:
            return EventSink(name=name, factory=lambda: probe)

    manager = get_plugin_manager()
    manager.register(Attach(), name=name)
    try:
        await _sink_runs()
        if not await asyncio.to_thread(flush_sinks, CALL_TIMEOUT_S):
            findings.add(
                f"handle() did not catch up with two runs' events within {CALL_TIMEOUT_S:g} s; "
                "keep it quick (batch slow I/O in flush())"
            )
    finally:
        await asyncio.to_thread(manager.unregister, name)  # closes it, within the deadline
    if probe.handled == 0:
        findings.add("the sink never got an event: it was not attached (see the errors above)")
    if probe.closed != 1 or not probe.close_done.is_set():
        findings.add("close() did not return in time when the sink was detached")
    findings.raise_any()


async def _sink_runs() -> None:
    """Runs that make every kind of event: nodes that pass and fail, tools, concurrent runs."""

    def lookup(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    fake = FakeAnthropicAPI(tool_then_answer("lookup"))
    agent = Agent(name="sink-check", client=fake.client(max_retries=0), tools=[lookup])

    @workflow(name="sink-check")
    async def passing(ctx: WorkflowContext, city: str) -> str:
        ctx.event_tree.add_event(ctx.node, "checking", city=city)
        return str(await ctx.step("ask", lambda: agent.prompt(f"Weather in {city}?")))

    @workflow(name="sink-check-failing")
    async def failing(ctx: WorkflowContext) -> None:
        await ctx.step("fail", fail)

    await asyncio.gather(passing.run("Oslo"), passing.run("Rome"))
    with contextlib.suppress(WorkflowError):
        await failing.run()
