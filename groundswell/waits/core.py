"""People in the loop: a run waits for a person's decision, and a person gives it.

A wait is a ``wait`` node in the run's tree: it starts ``running``, turns
``waiting`` (event sinks get a ``wait_opened`` event on it, with what it waits
for) and ends ``completed`` with who decided and when in its payload
(``decision``, ``answered_by``, ``answered_at``, and ``answer``, ``reason`` or
``input``). `pending` lists the open waits of this process, oldest first;
`approve`, `reject` and `answer` decide one, from any thread (an HTTP handler,
a CLI thread) or task. Each returns an `Answered`, which may also be awaited:
``await groundswell.waits.approve(wait_id)`` is the form that keeps working
where the answer must reach another process.

The kernel opens waits through `open_wait`, which hands the waiting to the
workflow's execution engine (`groundswell.workflow.execution.WaitingEngine`: its
optional ``opening`` and ``wait``); a decision on a wait another process holds
goes to the engines that reach it (`groundswell.workflow.execution.RemoteWaits`), and
`deliver` is how an engine hands a wait of this process a decision from elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pydantic

from ..errors import ConfigurationError, InvalidAnswer, UnknownWait, WaitClosed, WaitTimedOut
from ..scrubbing.serialize import jsonable, redact
from ..tree.tree import CANCELLATIONS, EventNode, EventTree, NodeStatus, NodeType
from ..workflow.execution import RemoteWaits, WaitingEngine, created_engines
from ..workflow.outcomes import end_failed
from .approval import check_approval_input

if TYPE_CHECKING:
    from ..workflow.workflow import WorkflowContext

__all__ = [
    "Answered", "Decision", "Wait", "WaitOpening",
    "answer", "approve", "deliver", "pending", "reject", "verbs",
]  # fmt: skip

DecisionKind = Literal["approve", "reject", "answer"]
#: Which verbs decide a wait of each kind; a kind not named here takes any verb.
VERBS: dict[str, tuple[DecisionKind, ...]] = {
    "approval": ("approve", "reject"),
    "question": ("answer",),
}
#: How many closed wait ids are remembered, to say "answered already" rather than "unknown".
CLOSED_KEPT = 1_000


@dataclass(frozen=True, slots=True)
class Wait:
    """An open wait: what a run waits for a person to decide.

    ``id`` is short and URL-safe (it names the wait to `approve`, `reject` and
    `answer`); ``kind`` is ``"approval"``, ``"question"``...; ``run_id`` is the
    id of the run's root node and ``node_id`` that of the ``wait`` node.
    ``request`` (JSON, secrets removed) is what it waits for: for a question
    ``{"question", "schema"}`` (the JSON schema the answer must fit), for an
    approval ``{"tool", "input", "agent", "tool_use_id"}``. ``opened_at`` and ``deadline`` (when
    its declared outcome applies, or ``None``) are Unix times in seconds.
    """

    id: str
    kind: str
    run_id: str
    node_id: str
    request: dict[str, Any]
    opened_at: float
    deadline: float | None = None

    @property
    def agent(self) -> str | None:
        """The agent the wait is for (an approval's, or an agent's ``ask_user`` question),
        from ``request["agent"]``; ``None`` for a workflow's own ``ctx.ask``."""
        agent = self.request.get("agent")
        return agent if isinstance(agent, str) else None

    def to_dict(self) -> dict[str, Any]:
        """The wait as a JSON-safe dict (what an HTTP listing or a chat message shows),
        with its ``agent``."""
        return {**dataclasses.asdict(self), "agent": self.agent}


@dataclass(frozen=True, slots=True)
class Decision:
    """What was decided on a wait.

    ``kind`` is ``"approve"`` (``input``: the tool input to use instead, or
    ``None`` for unchanged), ``"reject"`` (``reason``) or ``"answer"``
    (``value``, validated against the question's ``response_format``). ``by``
    names who decided, ``at`` when (Unix time). ``timed_out`` is true when
    nobody did and the wait's declared outcome applied at its deadline.
    Build one with `Decision.approve`, `Decision.reject` or `Decision.answer`.
    """

    kind: DecisionKind
    input: dict[str, Any] | None = None
    reason: str | None = None
    value: Any = None
    by: str | None = None
    at: float | None = None
    timed_out: bool = False

    @classmethod
    def approve(cls, input: dict[str, Any] | None = None, *, by: str | None = None) -> Decision:
        """Approve; with ``input``, run the tool with that input instead."""
        return cls("approve", input=input, by=by)

    @classmethod
    def reject(cls, reason: str, *, by: str | None = None) -> Decision:
        """Reject, saying why (the agent is told ``reason``)."""
        return cls("reject", reason=reason, by=by)

    @classmethod
    def answer(cls, value: Any, *, by: str | None = None) -> Decision:
        """Answer a question with ``value``."""
        return cls("answer", value=value, by=by)


@dataclass(frozen=True, slots=True)
class Answered:
    """What `approve`, `reject` or `answer` delivered: the ``wait`` and the ``decision``.

    Awaiting it returns it: ``await groundswell.waits.answer(...)`` is the form
    to write where the answer may have to reach another process.
    """

    wait: Wait
    decision: Decision

    def __await__(self) -> Generator[Any, None, Answered]:
        return _ready(self).__await__()


async def _ready(answered: Answered) -> Answered:
    return answered


@dataclass(frozen=True, slots=True)
class _Delivering(Answered):
    """A decision on its way to a wait of another process: until awaited, ``wait`` names
    only the id; awaiting it returns the engine's `Answered` (or raises its error)."""

    task: asyncio.Task[Answered] | None = None

    def __await__(self) -> Generator[Any, None, Answered]:
        assert self.task is not None
        return self.task.__await__()


@dataclass(frozen=True, slots=True)
class WaitOpening:
    """Where a wait opens: its ``id``, when it opened and its ``deadline`` (Unix times);
    an engine's ``opening`` may give a recovered wait the ones it had before."""

    id: str
    opened_at: float
    deadline: float | None = None


#: What `open_wait` asks about every wait it opens, until one returns a `Decision`
#: (``groundswell.testing.auto_answer`` adds them).
Answerer = Callable[[Wait], Decision | None]


class _Open:
    """A wait in this process's registry, and how to deliver its outcome to its run."""

    __slots__ = ("future", "loop", "on_timeout", "timeout", "validate", "verbs", "wait")

    def __init__(
        self,
        wait: Wait,
        loop: asyncio.AbstractEventLoop,
        validate: Callable[[Any], Any] | None,
        on_timeout: Decision | None,
        timeout: float | None,
        verbs: tuple[DecisionKind, ...] | None = None,
    ) -> None:
        self.wait = wait
        self.loop = loop
        self.future: asyncio.Future[Decision] = loop.create_future()
        self.validate = validate
        self.on_timeout = on_timeout
        self.timeout = timeout
        #: The verbs that decide it, when not its kind's (`VERBS`).
        self.verbs = verbs


# Answers come from any thread: the registry is read and changed under this lock.
_lock = threading.Lock()
_open: dict[str, _Open] = {}
_closed: OrderedDict[str, str] = OrderedDict()  # wait id -> how it closed
_answerers: ContextVar[tuple[Answerer, ...]] = ContextVar("groundswell_answerers", default=())


def pending() -> list[Wait]:
    """The open waits of this process, oldest first."""
    with _lock:
        waits = [entry.wait for entry in _open.values()]
    return sorted(waits, key=lambda w: w.opened_at)


def approve(
    wait_id: str, *, input: dict[str, Any] | None = None, by: str | None = None
) -> Answered:
    """Approve the approval wait ``wait_id``; ``input`` replaces the tool's input.

    ``by`` names who approved (recorded on the wait's node). Raises
    `UnknownWait` (`WaitClosed` once decided) or `InvalidAnswer`. A wait held elsewhere
    (a durable run's) goes there: in a coroutine, await the result.
    """
    check_approval_input(wait_id, input)
    return _decide(wait_id, Decision("approve", input=input, by=_by(by)))


def reject(wait_id: str, reason: str, *, by: str | None = None) -> Answered:
    """Reject the approval wait ``wait_id``; ``reason`` (required) says why."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidAnswer(
            f"reject({wait_id!r}, reason): give the reason as a non-empty string, got {reason!r:.60}",
            wait_id=str(wait_id),
        )
    return _decide(wait_id, Decision("reject", reason=reason, by=_by(by)))


def answer(wait_id: str, value: Any, *, by: str | None = None) -> Answered:
    """Answer the question wait ``wait_id`` with ``value``.

    The value must fit the question's ``response_format`` (text when it has
    none; a JSON string is read for a model); one that does not raises
    `InvalidAnswer` naming what is wrong, and the wait stays open.
    """
    return _decide(wait_id, Decision("answer", value=value, by=_by(by)))


def verbs(wait_id: str) -> tuple[DecisionKind, ...]:
    """The verbs that decide the open wait ``wait_id`` of this process (``"approve"``,
    ``"reject"``, ``"answer"``): what an engine tells other processes may decide it."""
    entry = _entry(wait_id)
    return entry.verbs or VERBS.get(entry.wait.kind) or ("approve", "reject", "answer")


def use_answerer(answerer: Answerer) -> Token[tuple[Answerer, ...]]:
    """Ask ``answerer`` about every wait opened in this context from now on (the last added
    is asked first); pass the token to `drop_answerer` to stop. For ``auto_answer``."""
    if not callable(answerer):
        raise ConfigurationError(f"an answerer must be callable, got {type(answerer).__name__}")
    return _answerers.set((*_answerers.get(), answerer))


def drop_answerer(token: Token[tuple[Answerer, ...]]) -> None:
    """Undo the `use_answerer` that returned ``token``."""
    _answerers.reset(token)


def _by(by: str | None) -> str | None:
    if by is not None and not isinstance(by, str):
        raise InvalidAnswer(f"by= names who decided, as a string; got {type(by).__name__}")
    return by


def _entry(wait_id: str) -> _Open:
    if not isinstance(wait_id, str):
        raise UnknownWait(
            f"a wait id is a string (see groundswell.waits.pending()), got {type(wait_id).__name__}",
            wait_id=repr(wait_id),
        )
    with _lock:
        entry = _open.get(wait_id)
    if entry is None:
        raise _gone(wait_id)
    return entry


def _gone(wait_id: str) -> UnknownWait:
    """The error for a wait id that is not open: `WaitClosed` saying how it closed, if known."""
    with _lock:
        closed = _closed.get(wait_id)
    if closed is not None:
        return WaitClosed(
            f"wait {wait_id!r} is closed already ({closed}); groundswell.waits.pending() "
            "lists the open ones",
            wait_id=wait_id,
            closed=closed,
        )
    return UnknownWait(
        f"no open wait has the id {wait_id!r} in this process; groundswell.waits.pending() "
        "lists the open ones",
        wait_id=wait_id,
    )


def deliver(wait_id: str, decision: Decision) -> Answered:
    """Deliver ``decision`` (from another process, a checkpoint) to the wait ``wait_id`` of
    this process, checked as `approve`, `reject` and `answer` check theirs; for engines.

    ``decision.at`` is kept when set. Raises `UnknownWait` or `InvalidAnswer`.
    """
    if not isinstance(decision, Decision):
        raise InvalidAnswer(f"deliver({wait_id!r}, ...) takes a Decision, got {decision!r:.60}")
    return _settle_local(_entry(wait_id), decision)


def _decide(wait_id: str, decision: Decision) -> Answered:
    """Check ``decision``, close the wait and send it to its run (elsewhere, if not here)."""
    try:
        entry = _entry(wait_id)
    except UnknownWait as missing:
        remote: list[RemoteWaits] = [e for e in created_engines() if isinstance(e, RemoteWaits)]
        # A wait this process stopped waiting on (its run's task was cancelled here) may
        # still be open in the process that took the durable run over.
        if not remote or (isinstance(missing, WaitClosed) and missing.closed != "cancelled"):
            raise
        return _send_away(remote, str(wait_id), decision, missing)
    return _settle_local(entry, decision)


def _send_away(
    engines: list[RemoteWaits], wait_id: str, decision: Decision, missing: UnknownWait
) -> Answered:
    """Hand ``decision`` to the engines that keep waits of other processes, first taker wins."""

    async def send() -> Answered:
        for engine in engines:
            answered = await engine.decide(wait_id, decision)
            if answered is not None:
                return answered
        raise UnknownWait(
            f"no open wait has the id {wait_id!r}, in this process or in the durable runs its "
            "execution engines can reach; groundswell.waits.pending() lists this process's",
            wait_id=wait_id,
        ) from missing

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a plain call, in a thread without a loop: delivered before it returns
        return asyncio.run(send())
    placeholder = Wait(wait_id, "", "", "", {}, 0.0)
    return _Delivering(placeholder, decision, loop.create_task(send()))


def _settle_local(entry: _Open, decision: Decision) -> Answered:
    wait_id = entry.wait.id
    wait = entry.wait
    verbs = entry.verbs or VERBS.get(wait.kind)
    if verbs is not None and decision.kind not in verbs:
        how = " or ".join(f"groundswell.waits.{v}({wait_id!r}, ...)" for v in verbs)
        raise InvalidAnswer(
            f"wait {wait_id!r} is a {wait.kind}: decide it with {how}, not {decision.kind}()",
            wait_id=wait_id,
        )
    if decision.kind == "answer" and entry.validate is not None:
        try:
            value = entry.validate(decision.value)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise _invalid(wait, exc) from None
        decision = dataclasses.replace(decision, value=value)
    if decision.at is None:
        decision = dataclasses.replace(decision, at=time.time())
    with _lock:
        first = _open.get(wait_id) is entry  # or another thread decided it meanwhile
        if first:
            del _open[wait_id]
            _remember(wait_id, f"{_verb_past(decision.kind)} by {decision.by or 'someone'}")
    if not first:
        raise _gone(wait_id)
    _settle(entry, decision)
    return Answered(wait, decision)


def _verb_past(kind: str) -> str:
    return {"approve": "approved", "reject": "rejected"}.get(kind, "answered")


def _invalid(wait: Wait, exc: ValueError) -> InvalidAnswer:
    errors: list[dict[str, Any]] = []
    if isinstance(exc, pydantic.ValidationError):
        errors = [dict(e) for e in exc.errors(include_url=False)]
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'the answer'}: {e['msg']}" for e in errors[:5]
        )
    else:
        problems = str(exc)
    question = wait.request.get("question")
    about = f" ({question!r:.80})" if isinstance(question, str) else ""
    return InvalidAnswer(
        f"the answer to wait {wait.id!r}{about} does not fit: {problems}. The wait stays "
        "open: answer it again",
        wait_id=wait.id,
        errors=errors,
    )


def _remember(wait_id: str, how: str) -> None:
    # Under _lock. Bounded: a long-lived process opens many waits.
    _closed[wait_id] = how
    while len(_closed) > CLOSED_KEPT:
        _closed.popitem(last=False)


def _settle(entry: _Open, outcome: Decision | BaseException) -> None:
    """Resolve the wait's future on its own loop, whichever thread this runs on."""

    def settle() -> None:
        future = entry.future
        if future.done():  # its run was cancelled meanwhile
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    try:
        here = asyncio.get_running_loop() is entry.loop
    except RuntimeError:  # no loop in this thread: an HTTP handler, a CLI thread
        here = False
    if here:
        settle()
        return
    # RuntimeError: the run's loop is closed, so there is nobody left to tell.
    with contextlib.suppress(RuntimeError):
        entry.loop.call_soon_threadsafe(settle)


def _expire(entry: _Open) -> None:
    """The deadline passed (on the run's loop): the declared outcome, or `WaitTimedOut`."""
    wait = entry.wait
    with _lock:
        if _open.get(wait.id) is not entry:
            return  # decided just before
        del _open[wait.id]
        _remember(wait.id, f"timed out after {entry.timeout:g} s")
    outcome: Decision | BaseException
    if entry.on_timeout is not None:
        outcome = dataclasses.replace(entry.on_timeout, at=time.time(), timed_out=True)
    else:
        outcome = WaitTimedOut(
            f"nobody answered wait {wait.id!r} ({wait.kind}) within {entry.timeout:g} s, and "
            "it declared no outcome for that (e.g. default= for ctx.ask)",
            wait_id=wait.id,
            timeout=entry.timeout or 0.0,
        )
    _settle(entry, outcome)


def _close(wait: Wait, how: str) -> None:
    with _lock:
        if _open.get(wait.id) is not None:
            del _open[wait.id]
            _remember(wait.id, how)


def _new_id() -> str:
    # 48 random bits as 12 hex digits: short enough to type, URL- and shell-safe.
    while True:
        wait_id = secrets.token_hex(6)
        with _lock:
            if wait_id not in _open and wait_id not in _closed:
                return wait_id


def check_timeout(timeout: float | None, owner: str) -> None:
    """`ConfigurationError` unless ``timeout`` is ``None`` or seconds > 0."""
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigurationError(f"{owner}: timeout must be seconds > 0 or None, got {timeout!r}")


async def open_wait(
    kind: str,
    request: dict[str, Any],
    *,
    tree: EventTree,
    parent: EventNode,
    name: str,
    timeout: float | None = None,
    on_timeout: Decision | None = None,
    validate: Callable[[Any], Any] | None = None,
    workflow: WorkflowContext | None = None,
    verbs: tuple[DecisionKind, ...] | None = None,
) -> Decision:
    """Open a wait under ``parent`` and return the `Decision` on it: the kernel's seam.

    Starts the ``wait`` node ``name`` (payload: ``wait_id``, ``kind``,
    ``request``, ``deadline``), sets it ``waiting``, records a
    ``wait_opened`` event (sinks get it), registers the wait for `pending`,
    asks the ``auto_answer`` answerers, and awaits the decision, through
    ``workflow``'s engine when it is a `WaitingEngine`. ``validate`` checks an
    answer when it is given (it returns the value to use, or raises
    ``ValueError``: the answer is refused and the wait stays open). After
    ``timeout`` seconds with no decision, ``on_timeout`` applies (marked
    ``timed_out``), or `WaitTimedOut` is raised when it is ``None``. The node
    ends ``completed`` with the decision, ``failed`` on an error, ``cancelled``
    when the awaiting task is. ``verbs`` names the verbs that decide this wait
    when they are not its kind's (a server's question may also be rejected).
    """
    check_timeout(timeout, f"wait {name!r}")
    # What pending() lists may leave the process: secrets masked, but not in a
    # question's JSON schema, which the code wrote (its "password" field is a field).
    schema = request.get("schema")
    request = redact({key: value for key, value in request.items() if key != "schema"})
    if schema is not None:
        request["schema"] = jsonable(schema)
    opened = time.time()
    opening = WaitOpening(_new_id(), opened, None if timeout is None else opened + timeout)
    # Any engine may take the waiting over; typed as object, since its methods are optional.
    engine: object = workflow.engine if workflow is not None else None
    place = getattr(engine, "opening", None)
    if workflow is not None and place is not None:
        # A durable engine: the id and deadline the wait had before a recovery.
        opening = await place(workflow, kind, name, opening)
    wait_id, opened, deadline = opening.id, opening.opened_at, opening.deadline
    payload: dict[str, Any] = {"wait_id": wait_id, "kind": kind, "request": request}
    if deadline is not None:
        payload["deadline"] = deadline
    node = tree.start_node(NodeType.WAIT, name, parent, payload=payload)
    root = tree.root
    wait = Wait(wait_id, kind, root.id if root else node.id, node.id, request, opened, deadline)
    loop = asyncio.get_running_loop()
    entry = _Open(wait, loop, validate, on_timeout, timeout, verbs)
    with _lock:
        _open[wait_id] = entry
    timer = None
    try:
        node.status = NodeStatus.WAITING
        # The event carries the new status: sinks see a node's status only in its
        # start and end records, and this node has not ended.
        tree.add_event(
            node,
            "wait_opened",
            wait_id=wait_id,
            kind=kind,
            request=request,
            deadline=deadline,
            status=NodeStatus.WAITING.value,
        )
        if deadline is not None:
            timer = loop.call_later(max(0.0, deadline - time.time()), _expire, entry)
        for answerer in reversed(_answerers.get()):  # the innermost first, like overrides
            auto = answerer(wait)
            if auto is not None:
                _decide(wait_id, auto)
                break
        if workflow is not None and isinstance(engine, WaitingEngine):
            decision = await engine.wait(workflow, node, wait, entry.future)
        else:
            decision = await entry.future
    except BaseException as exc:
        _close(
            wait, "cancelled" if isinstance(exc, CANCELLATIONS) else f"failed: {type(exc).__name__}"
        )
        end_failed(tree, node, exc)  # a failure names the wait as where the run failed
        raise
    finally:
        if timer is not None:
            timer.cancel()
    # An engine may have settled it without this process's registry (a decision from
    # another process, or a recovered one): the wait is closed all the same.
    _close(wait, f"{_verb_past(decision.kind)} by {decision.by or 'someone'}")
    _record(node, decision)
    tree.end_node(node, NodeStatus.COMPLETED)
    return decision


def _record(node: EventNode, decision: Decision) -> None:
    # Masked as everything in the tree is: an answer may hold a password a form asked for.
    payload = node.payload
    payload["decision"] = decision.kind
    payload["answered_by"] = redact(decision.by)
    payload["answered_at"] = decision.at
    if decision.kind == "answer":
        payload["answer"] = redact(decision.value)
    elif decision.kind == "reject":
        payload["reason"] = redact(decision.reason)
    elif decision.input is not None:
        payload["input"] = redact(decision.input)
    if decision.timed_out:
        payload["timed_out"] = True
