"""Waits for people in durable runs: kept across processes and restarts.

A wait in a durable run (``ctx.ask``, a tool call waiting for approval) gets
an id derived from the run's id and the wait's key (``_keys``), so a recovered
run opens it again under the same id, and a checkpoint records when it opened
and its deadline, so the deadline does not move on a restart. Its decision
arrives in one of three ways:

- from this process (``groundswell.waits.approve`` here, ``auto_answer``, the
  deadline): the kernel's own future;
- from another process: a DBOS message on the topic ``groundswell.wait:<id>``
  (``_remote`` sends it), taken with ``DBOS.recv`` in the workflow and handed
  to the kernel with ``groundswell.waits.deliver``, which checks it as it would
  a person's answer here;
- from a checkpoint: the decision is recorded (as a DBOS step named
  ``decided <key>``) once taken, and a recovery delivers it again.

DBOS records a received message by step number, which a recovery does not
keep, so `Run.load` also indexes the messages an earlier execution received by
wait id: one taken from the queue just before a crash is not lost. The run's
open waits are published as the workflow's DBOS attributes
(``groundswell_waits``, and ``groundswell_closed`` for recently decided ones),
which other processes list in one query.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Any

import pydantic_core
from dbos import DBOS

from groundswell import EventNode, InvalidAnswer, UnknownWait, WorkflowContext
from groundswell.waits import Decision, Wait, WaitOpening, deliver, verbs

from ._keys import Run, current_run, op_key, outside

__all__ = ["CLOSED_ATTR", "CLOSED_KEPT", "OPEN_ATTR", "message_for", "opening", "topic", "wait"]

#: The workflow attributes other processes read: the run's open waits by id, and how
#: recently closed ones closed.
OPEN_ATTR = "groundswell_waits"
CLOSED_ATTR = "groundswell_closed"
#: How many closed waits a run keeps listed (to answer "decided already").
CLOSED_KEPT = 100
# How long one DBOS.recv waits before it is asked again (it records its deadline).
_RECV_S = 3600.0


def topic(wait_id: str) -> str:
    """The DBOS message topic a wait's decisions are sent on."""
    return f"groundswell.wait:{wait_id}"


def message_for(wait_id: str, decision: Decision, sent_at: float) -> dict[str, Any]:
    """A decision as a DBOS message (plain JSON data), and as a checkpoint records it."""
    return {
        "wait": wait_id,
        "kind": decision.kind,
        "input": decision.input,
        "reason": decision.reason,
        "value": _plain(decision.value),
        "by": decision.by,
        "sent_at": sent_at,
        "timed_out": decision.timed_out,
    }


def _plain(value: Any) -> Any:
    # The answer as JSON data: validated again (into its type) when delivered.
    return pydantic_core.to_jsonable_python(value, fallback=str)


def _decision(message: dict[str, Any]) -> Decision | None:
    kind = message.get("kind")
    if kind not in ("approve", "reject", "answer"):
        return None
    return Decision(
        kind=kind,
        input=message.get("input"),
        reason=message.get("reason"),
        value=message.get("value"),
        by=message.get("by"),
        at=message.get("sent_at"),
        timed_out=bool(message.get("timed_out")),
    )


class _Slot:
    """A wait of this execution between `opening` and `wait`."""

    __slots__ = ("deadline", "early", "key", "run")

    def __init__(self, run: Run, key: str, deadline: float | None) -> None:
        self.run = run
        self.key = key
        self.deadline = deadline
        #: Answers to deliver before waiting: received by an earlier execution, or
        #: queued while nobody ran the wait and its deadline passed.
        self.early: list[dict[str, Any]] = []


class _RunWaits:
    """The open and recently closed waits of one execution of a run, as published."""

    def __init__(self) -> None:
        self.slots: dict[str, _Slot] = {}
        self.open: dict[str, dict[str, Any]] = {}
        self.closed: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.lock = asyncio.Lock()
        self.seeded = False


def _state(run: Run) -> _RunWaits:
    if run.waits is None:
        run.waits = _RunWaits()
    state: _RunWaits = run.waits
    return state


async def opening(ctx: WorkflowContext, name: str, given: WaitOpening) -> WaitOpening:
    """The wait's id, opening time and deadline: as recorded, on a recovery."""
    keyed = op_key(f"wait {name}") if DBOS.step_id is None else None
    if keyed is None:  # not in a durable run
        return given
    run, key = keyed
    wait_id = hashlib.sha256(f"{run.workflow_id}\0{key}".encode()).hexdigest()[:12]
    recorded = run.recorded.pop(key, None)
    output = recorded.get("output") if recorded is not None else None
    if isinstance(output, dict) and output.get("wait_id") == wait_id:
        opened_at, deadline = float(output["opened_at"]), output.get("deadline")
    else:
        opened_at, deadline = given.opened_at, given.deadline
        record = {"wait_id": wait_id, "opened_at": opened_at, "deadline": deadline}
        await DBOS.run_step_async({"name": key}, lambda: record)
    slot = _Slot(run, key, deadline)
    slot.early = run.received.pop(wait_id, [])
    if deadline is not None and deadline <= time.time():
        # Past its deadline already (the run was down): an answer sent in time may be
        # queued; take it now, before the kernel's timer applies the deadline.
        while (message := await DBOS.recv_async(topic(wait_id), timeout_seconds=0)) is not None:
            slot.early.append(message)
    _state(run).slots[wait_id] = slot
    return WaitOpening(wait_id, opened_at, deadline)


async def wait(
    ctx: WorkflowContext, node: EventNode, wait: Wait, decision: Awaitable[Decision]
) -> Decision:
    """The decision on ``wait``: recorded, received from another process, or given here."""
    future = asyncio.ensure_future(decision)
    run = current_run()
    slot = run.waits.slots.pop(wait.id, None) if run is not None and run.waits else None
    if slot is None:  # not a durable run's wait
        return await future
    run, tree = slot.run, ctx.event_tree
    decided_key = f"decided {slot.key}"
    recorded = run.recorded.pop(decided_key, None)
    output = recorded.get("output") if recorded is not None else None
    replayed = _decision(output) if isinstance(output, dict) else None
    if replayed is not None:
        node.metrics["recovered"] = True
        tree.add_event(node, "recovered", workflow_id=run.workflow_id)
        if not replayed.timed_out:  # a timed-out one: the passed deadline applies it again
            with contextlib.suppress(InvalidAnswer, UnknownWait):
                deliver(wait.id, replayed)
        if replayed.timed_out or future.done():
            await _publish(run, wait, closed=_how(replayed))
            return await future
    # Synchronously, before the kernel's timer can run: answers already received.
    for message in slot.early:
        if future.done() or _offer(wait, slot, message, node, ctx):
            break
    if not future.done():
        await _publish(run, wait, opened=verbs(wait.id))
        receiver = asyncio.ensure_future(_receive(wait, slot, node, ctx))
        try:
            await asyncio.wait([future, receiver], return_when=asyncio.FIRST_COMPLETED)
        finally:
            receiver.cancel()
            await asyncio.wait([receiver])  # raises nothing of its own; a cancellation, yes
        if not future.done():  # the receiver failed (the database): the wait fails with it
            future.cancel()
            receiver.result()
    try:
        decided = await future
    except asyncio.CancelledError:
        raise  # this process stops waiting; the run is still waiting elsewhere
    except BaseException:
        await _publish(run, wait, closed="failed")
        raise
    record = message_for(wait.id, decided, decided.at or time.time())
    await DBOS.run_step_async({"name": decided_key}, lambda: record)
    await _publish(run, wait, closed=_how(decided))
    return decided


def _how(decision: Decision) -> str:
    if decision.timed_out:
        return "timed out"
    past = {"approve": "approved", "reject": "rejected"}.get(decision.kind, "answered")
    return f"{past} by {decision.by or 'someone'}"


async def _receive(wait: Wait, slot: _Slot, node: EventNode, ctx: WorkflowContext) -> None:
    """Take decisions sent from other processes until one is delivered."""
    while True:
        message = await DBOS.recv_async(topic(wait.id), timeout_seconds=_RECV_S)
        if message is not None and _offer(wait, slot, message, node, ctx):
            return


def _offer(wait: Wait, slot: _Slot, message: Any, node: EventNode, ctx: WorkflowContext) -> bool:
    """Deliver a received decision to the kernel; True once the wait is decided."""
    tree = ctx.event_tree
    decision = _decision(message) if isinstance(message, dict) else None
    if decision is None or message.get("wait") != wait.id:
        return False
    sent = decision.at
    if slot.deadline is not None and sent is not None and sent > slot.deadline:
        tree.add_event(node, "answer_late", by=decision.by, sent_at=sent)
        return False
    try:
        # A person's decision, never a deadline's (a message cannot claim one).
        deliver(wait.id, dataclasses.replace(decision, timed_out=False))
    except InvalidAnswer as exc:
        # Checked by the sender against the JSON schema; the type may ask for more.
        tree.add_event(node, "answer_refused", by=decision.by, error=str(exc))
        return False
    except UnknownWait:
        pass  # decided meanwhile (here, or by its deadline)
    return True


async def _publish(
    run: Run, wait: Wait, *, opened: tuple[str, ...] = (), closed: str | None = None
) -> None:
    """Update the run's published waits (its DBOS workflow attributes): ``opened`` with
    the verbs that decide it, or ``closed`` saying how."""
    state = _state(run)
    async with state.lock:
        if not state.seeded:
            state.seeded = True
            if run.loaded:  # a recovery: keep what the earlier execution listed
                await _seed(run, state)
        if opened and wait.id not in state.closed:  # not decided while this awaited
            entry = {**wait.to_dict(), "workflow_id": run.workflow_id, "verbs": list(opened)}
            state.open[wait.id] = entry
        if closed is not None:
            state.open.pop(wait.id, None)
            state.closed[wait.id] = {"how": closed}
            while len(state.closed) > CLOSED_KEPT:
                state.closed.popitem(last=False)
        attributes = {OPEN_ATTR: dict(state.open), CLOSED_ATTR: dict(state.closed)}
        # Outside the workflow's context: not an operation of the run.
        await outside(
            DBOS.update_workflow_attributes_async(run.workflow_id, attributes, merge=True)
        )


async def _seed(run: Run, state: _RunWaits) -> None:
    statuses = await outside(
        DBOS.list_workflows_async(
            workflow_ids=[run.workflow_id], load_input=False, load_output=False
        )
    )
    attributes = (statuses[0].attributes or {}) if statuses else {}
    listed = attributes.get(OPEN_ATTR)
    if isinstance(listed, dict):
        state.open.update(listed)
    gone = attributes.get(CLOSED_ATTR)
    if isinstance(gone, dict):
        state.closed.update(gone)
