"""Questions to a person: ``ctx.ask`` and ``groundswell.ask_user``.

``ctx.ask(question, response_format)`` opens a ``question`` wait
(`groundswell.waits`) under the current node and returns the answer, validated
into ``response_format``. ``Agent(tools=[groundswell.ask_user])`` gives the
model a tool that opens one under its ``tool_call`` node and returns the
person's typed answer as the tool result; it asks for text, or for one of a
few ``choices`` the model offers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import pydantic

from ..errors import ConfigurationError
from ..runtime.context import current_frame
from ..tools.tool import Tool, ToolContext
from .core import Decision, check_timeout, open_wait

if TYPE_CHECKING:
    from ..workflow.workflow import WorkflowContext

__all__ = ["NO_DEFAULT", "AskUser", "ask_question", "ask_user", "question_format"]


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


def question_format(response_format: Any) -> tuple[Callable[[Any], Any], dict[str, Any]]:
    """How an answer to a question is checked, and the JSON schema it must fit.

    ``None`` asks for text; anything pydantic validates (a model, ``int``,
    ``list[str]``, a ``Literal``...) for a value of that type.
    """
    if response_format is None:
        return _text, {"type": "string"}
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(response_format)
        schema = adapter.json_schema()
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise ConfigurationError(
            f"ctx.ask(response_format=...) must be a type pydantic can validate (a BaseModel "
            f"subclass, int, list[str]...), got {response_format!r:.80}: {exc}"
        ) from None
    takes_text = schema.get("type") == "string"

    def validate(value: Any) -> Any:
        if isinstance(value, str) and not takes_text:
            # A form or a command line sends JSON text: read it as the value.
            try:
                return adapter.validate_json(value)
            except pydantic.ValidationError as exc:
                if any(e["type"] == "json_invalid" for e in exc.errors()):
                    return adapter.validate_python(value)
                try:  # JSON of another type ("12345" for a str | None): as text
                    return adapter.validate_python(value)
                except pydantic.ValidationError:
                    raise exc from None  # what the JSON it was lacks says more
        return adapter.validate_python(value)

    return validate, schema


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"the question asks for text, got {type(value).__name__} {value!r:.60}")
    return value


NO_DEFAULT: Any = object()


async def ask_question(
    ctx: WorkflowContext,
    question: str,
    response_format: Any = None,
    *,
    timeout: float | None = None,
    default: Any = NO_DEFAULT,
) -> Any:
    """`WorkflowContext.ask`: open a question wait under the current node, return the answer."""
    if not isinstance(question, str) or not question.strip():
        raise ConfigurationError(
            f"ctx.ask(question): give the question as text, got {question!r:.60}"
        )
    tree = ctx.event_tree
    if ctx.node.ended_at is not None:
        raise ConfigurationError(
            f"ctx.ask({question!r:.40}): the workflow has already ended; ask while it runs"
        )
    check_timeout(timeout, f"ctx.ask({question!r:.40})")
    validate, schema = question_format(response_format)
    frame = current_frame()
    parent = frame.node if frame is not None and frame.tree is tree else ctx.node
    decision = await open_wait(
        "question",
        {"question": question, "schema": schema},
        tree=tree,
        parent=parent,
        name="question",
        timeout=timeout,
        on_timeout=None if default is NO_DEFAULT else Decision.answer(default, by="deadline"),
        validate=validate,
        workflow=ctx,
    )
    return decision.value
