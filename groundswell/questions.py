"""``groundswell.ask_user``: a tool through which an agent asks a person a question.

``Agent(tools=[groundswell.ask_user])`` gives the model a tool that opens a
``question`` wait (`groundswell.waits`) under its ``tool_call`` node and
returns the person's typed answer as the tool result. It asks for text, or
for one of a few ``choices`` the model offers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from .errors import ConfigurationError
from .run_context import current_frame
from .tools import Tool, ToolContext
from .waits import open_wait

__all__ = ["AskUser", "ask_user"]


async def _ask_user(question: str, ctx: ToolContext, choices: list[str] | None = None) -> str:
    """Ask the person you are working for a question, and wait for their typed answer.

    Use it only when you cannot go on well without something only they can tell
    you: a detail the task leaves out, a choice between options that is theirs
    to make, or a confirmation before something hard to undo. Do not use it for
    what your other tools can find out, or for what you can reasonably assume.
    Ask one clear question that stands on its own (the person may not see the
    rest of the conversation); when the answer is one of a few options, give
    them as choices. The result is their answer.

    Args:
        question: The question, complete in itself.
        choices: The answers to pick from, when there are only a few; leave it
            out for a free answer.
    """
    frame = current_frame()
    if frame is None or frame.node.id != ctx.node_id:
        raise ConfigurationError(
            "ask_user asks a person on behalf of an agent: give it to one "
            "(Agent(tools=[groundswell.ask_user])) rather than calling it directly"
        )
    if not question.strip():
        raise ValueError("the question is empty; ask it in words")
    options = [c for c in dict.fromkeys(choices or ()) if c.strip()]
    schema: dict[str, Any] = {"type": "string"}
    if options:
        schema["enum"] = options
    decision = await open_wait(
        "question",
        {
            "question": question,
            "schema": schema,
            "agent": ctx.agent,
            "tool_use_id": ctx.tool_use_id,
        },
        tree=frame.tree,
        parent=frame.node,
        name="question",
        validate=_one_of(options),
        workflow=frame.workflow,
    )
    answer: str = decision.value
    return answer


def _one_of(options: list[str]) -> Callable[[Any], str]:
    """How an answer is checked: text, and one of ``options`` when there are some."""
    by_fold = {option.casefold(): option for option in options}

    def validate(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"the question asks for text, got {type(value).__name__}")
        if not options:
            return value
        chosen = by_fold.get(value.strip().casefold())
        if chosen is None:
            raise ValueError(f"{value!r:.60} is not one of the choices {options}")
        return chosen  # as the model offered it, whatever the case it was typed in

    return validate


class AskUser(Tool):
    """The ``ask_user`` tool: a question to a person, so it never waits for approval too."""

    #: Read by the approval middleware: this tool's call is itself a wait for a person.
    asks_a_person: ClassVar[bool] = True


#: A ready tool an agent may be given: ``Agent(tools=[groundswell.ask_user])``.
ask_user = AskUser(_ask_user, name="ask_user")
