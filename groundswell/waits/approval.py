"""Tool approval: which tool calls wait for a person's decision before they run.

``Tool(requires_approval=True)`` marks a tool every call of which needs
approval. ``Agent(approval=...)`` is the agent's policy on top: ``True`` (every
call), a function given the `groundswell.ToolCall` that decides per call, or
an `Approval`, which also sets how long to wait and what happens then. The
kernel's ``approval`` middleware (`groundswell.waits.approval_middleware`) opens
the waits.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigurationError, InvalidAnswer
from ..tools.tool import check_timeout

if TYPE_CHECKING:
    from ..agent import ToolCall

__all__ = ["Approval", "Policy", "check_approval", "check_approval_input", "needs_approval"]

#: Decides whether one tool call needs approval: ``True`` when it does (sync or async).
Policy = Callable[["ToolCall"], bool | Awaitable[bool]]
OUTCOMES = ("reject", "approve")


@dataclass(frozen=True, slots=True)
class Approval:
    """Which tool calls of an agent wait for a person's approval, and for how long.

    ``when`` is ``True`` (every call), ``None`` or ``False`` (only the tools
    built with ``requires_approval=True``), or a function given the
    `groundswell.ToolCall` (``name``, ``input``...) that returns ``True`` when
    that call needs approval; it may be async, and should be quick. A tool that
    requires approval waits whatever ``when`` says. ``timeout`` (seconds, or
    ``None`` to wait as long as it takes) bounds each wait; when nobody decided
    by then, ``on_timeout`` applies: ``"reject"`` (the default: the model is
    told nobody approved the call in time) or ``"approve"``.

    ``Agent(approval=True)`` is ``Approval(when=True)`` and
    ``Agent(approval=fn)`` is ``Approval(when=fn)``.
    """

    when: bool | Policy | None = None
    timeout: float | None = None
    on_timeout: Literal["reject", "approve"] = "reject"


def check_approval(value: Any, owner: str) -> Approval | None:
    """``Agent(approval=...)`` as an `Approval` (``None`` when nothing beyond the tools' own
    ``requires_approval``); `ConfigurationError` naming what is wrong."""
    if value is None or value is False:
        return None
    if value is True:
        return Approval(True)
    if isinstance(value, Approval):
        when = value.when
        if when is not None and not isinstance(when, bool) and not callable(when):
            raise ConfigurationError(
                f"{owner}: Approval(when=...) must be True, False, None or a function taking "
                f"the ToolCall, got {type(when).__name__}"
            )
        check_timeout(value.timeout, f"{owner}: Approval")
        if value.on_timeout not in OUTCOMES:
            raise ConfigurationError(
                f"{owner}: Approval(on_timeout=...) must be 'reject' or 'approve', "
                f"got {value.on_timeout!r:.40}"
            )
        if not when and value.timeout is None:
            return None  # the same as no policy: only the tools' own requires_approval
        return value
    if callable(value):
        return Approval(value)
    raise ConfigurationError(
        f"{owner}: approval must be True, False, a function taking the ToolCall and returning "
        f"True when the call needs approval, or a groundswell.Approval; got {type(value).__name__}"
    )


async def needs_approval(policy: Approval | None, call: ToolCall) -> bool:
    """Whether ``call`` waits for approval: its tool requires it, or ``policy`` says so."""
    tool = call.tool
    if tool is None:
        return False  # no such tool: nothing would run, and the model is told so
    if getattr(tool, "asks_a_person", False):
        return False  # a question to a person (ask_user) is its own wait: nothing to approve
    if getattr(tool, "requires_approval", False) is True:
        return True
    when = policy.when if policy is not None else None
    if when is None or isinstance(when, bool):
        return bool(when)
    decided: object = when(call)  # what a policy returns is checked, not trusted
    if inspect.isawaitable(decided):
        decided = await decided
    if not isinstance(decided, bool):
        name = getattr(when, "__qualname__", None) or type(when).__name__
        raise ConfigurationError(
            f"the approval policy {name} returned {type(decided).__name__} {decided!r:.40} for "
            f"tool call {call.name!r}; it must return True (needs approval) or False"
        )
    return decided


def check_approval_input(wait_id: str, input: Any) -> None:
    """Raise `InvalidAnswer` unless ``input`` for ``approve(wait_id, input=...)`` is a dict or ``None``.

    Every ``approve`` (in this process, through a `groundswell.waits.client.WaitsClient`,
    or a plugin's remote backend) checks it first, so a wrong input fails the same way
    wherever the wait is held.
    """
    if input is not None and not isinstance(input, dict):
        raise InvalidAnswer(
            f"approve({wait_id!r}, input=...): input must be a dict of the tool's arguments "
            f"(or None to keep them), got {type(input).__name__}",
            wait_id=str(wait_id),
        )
