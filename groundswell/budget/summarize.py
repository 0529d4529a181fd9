"""The ``summarize`` strategy of a token budget: older turns become a summary in the instruction.

Called by the ``budget`` middleware (`groundswell.budget.middleware`) when a
request is over its budget. The latest turns stay as they are (at most
``keep_last_turns``, or the `Summarizer`'s ``last_<n>_turns``); the turns
before them are written up by a summarizer model, whose answer goes into the
instruction message (`groundswell.budget.summary.with_summary`). Turns that the
`Summarizer`'s ``preserve`` names stay word for word while they fit, before
any recent turn but the latest. The summary sits in the instruction, so it comes
before every kept turn, preserved ones included, which keep their own order; the
budget node's ``summary_covers`` says which turns (by position) it stands for.
When the summary comes out larger than planned and fewer turns fit beside it,
those are summarized too (one more summarizer call); any that still do not fit
are counted in ``dropped_turns``. When anything goes wrong the window slides
instead, and the budget node says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..agent import Agent
from ..prompt.prompt import Prompt, PromptOverrides
from ..runtime.context import Frame, current_frame, reset_frame, set_frame
from ..tree.tree import NodeStatus, NodeType
from .summary import (
    SUMMARIZER_SYSTEM,
    Summarizer,
    asked_for,
    previous_summary,
    transcript,
    with_summary,
)
from .token_budget import Turn, enter_budget, leave_budget, sliding_window
from .tokens import estimate_message

if TYPE_CHECKING:
    from .middleware import Enforcer

__all__ = ["plan", "preserved", "summarize"]


def preserved(turn: Turn, preserve: Sequence[str]) -> bool:
    """Whether ``preserve`` (a `Summarizer`'s) keeps ``turn`` word for word."""
    kinds = turn.kinds
    if "errors" in preserve and "tool_result:error" in kinds:
        return True
    if "decisions" in preserve and "assistant_text" in kinds:
        return True
    # A history turn starts with the user's own turn: only words after it count.
    asked = kinds.count("user_text") - (1 if "history" in kinds else 0)
    return "instructions" in preserve and asked > 0


def plan(turns: Sequence[Turn], room: int, keep: int, preserve: Sequence[str]) -> list[Turn]:
    """The turns to keep word for word within ``room``, oldest first: always the latest;
    then the turns ``preserve`` names, newest first, while they fit; then the latest
    ``keep`` turns, newest first, until one does not fit."""
    latest = turns[-1]
    left = room - latest.tokens
    chosen = {id(latest)}
    if preserve:
        for turn in reversed(turns[:-1]):
            if turn.tokens <= left and preserved(turn, preserve):
                chosen.add(id(turn))
                left -= turn.tokens
    for turn in reversed(turns[-keep:-1]):
        if id(turn) in chosen:
            continue
        if turn.tokens > left:
            break
        chosen.add(id(turn))
        left -= turn.tokens
    return [t for t in turns if id(t) in chosen]


async def summarize(
    enforcer: Enforcer,
    messages: list[dict[str, Any]],
    sizes: list[int],
    instruction: tuple[int, int],
    turns: list[Turn],
    room: int,
    node: Any,
) -> tuple[list[Turn], int]:
    """Keep the turns `plan` picks beside the summary, and replace the other turns with a
    summary in the instruction message (``messages[start:head]``); returns the turns
    kept and the new instruction's size. Falls back to a sliding window, saying why on
    the budget node, when there is nothing to summarize or no usable summary."""
    options = enforcer.budget.summary
    keep = options.keep_last(enforcer.budget.keep_last_turns)
    head = instruction[1]
    head_size = sum(sizes[instruction[0] : head])
    # Room left for the summary itself: what was asked for, else a quarter.
    summary_room = options.target_size if options.target_size is not None else room // 4
    planned = plan(turns, room - summary_room, keep, options.preserve)
    kept_ids = {id(t) for t in planned}
    gone = [t for t in turns if id(t) not in kept_ids]

    def fallback(reason: str) -> tuple[list[Turn], int]:
        node.payload["fallback"] = f"sliding_window: {reason}"
        return sliding_window(turns, room), head_size

    if not gone:
        return fallback("no turn before the latest to summarize")
    if enforcer.summarizer_failed:
        return fallback("the summarizer failed earlier in this prompt")
    first = messages[head - 1]
    summarized, kept_now = gone, planned
    for again in (False, True):
        earlier = [m for t in summarized for m in messages[t.start : t.end]]
        summary = await _ask(
            enforcer,
            asked_for(options, transcript(earlier, previous_summary(first))),
            node,
            max(64, summary_room),
            options,
        )
        if summary is None:
            enforcer.summarizer_failed = True
            return fallback("the summarizer failed")
        merged = with_summary(first, summary)
        new_head = head_size - sizes[head - 1] + estimate_message(merged)
        # The summary took the old turns' place; the kept turns must fit beside it.
        beside = room + head_size - new_head
        kept = plan(kept_now, beside, keep, options.preserve)
        if sum(t.tokens for t in kept) > beside:
            return fallback(
                f"the summary ({new_head - head_size + sizes[head - 1]} tokens with the "
                "instruction) left no room for the latest turn"
            )
        if len(kept) == len(kept_now) or again:
            break
        # The summary came out larger than planned: the turns it now crowds out are
        # summarized with the others rather than lost.
        still = {id(t) for t in kept}
        summarized = [t for t in turns if id(t) not in still]
        kept_now = kept
    messages[head - 1] = merged
    dropped = len(kept_now) - len(kept)  # crowded out twice: gone without a summary
    node.payload["summarized_turns"] = len(summarized)
    where = {id(t): i for i, t in enumerate(turns)}
    node.payload["summary_covers"] = [where[id(t)] for t in summarized]
    if dropped:
        node.payload["dropped_turns"] = dropped
    if options.preserve:
        node.payload["preserved_turns"] = sum(
            1 for t in kept[:-1] if preserved(t, options.preserve)
        )
    return kept, new_head


async def _ask(
    enforcer: Enforcer, text: str, parent: Any, max_tokens: int, options: Summarizer
) -> str | None:
    """The summary of ``text``, or ``None`` (recorded on ``parent``) when it fails."""
    summarizer = _summarizer(enforcer, options)
    tree = enforcer.tree
    payload: dict[str, Any] = {"model": summarizer.config.get("model")}
    if options.target_size is not None:
        payload["target_size"] = options.target_size
    if options.preserve:
        payload["preserve"] = list(options.preserve)
    node = tree.start_node(
        NodeType.SUMMARY, getattr(summarizer, "name", "summarizer"), parent, payload=payload
    )
    outer = current_frame()
    frame = set_frame(Frame(tree, node, outer.workflow if outer else None))
    # The summarizer's own prompt must not be squeezed by the budget it serves.
    scope = enter_budget(None, "summarizer")
    try:
        result = await summarizer.run(
            Prompt(user=f"{SUMMARIZER_SYSTEM}\n\n{text}"),
            PromptOverrides(max_tokens=max_tokens),
        )
        summary = str(result.output).strip()
        if not summary:
            raise ValueError("the summarizer answered with nothing")
    except Exception as exc:
        tree.end_node(node, NodeStatus.FAILED, error=exc)
        tree.add_event(parent, "summarize_failed", error=f"{type(exc).__name__}: {exc}")
        return None
    except BaseException as exc:
        tree.end_node_after(node, exc)
        raise
    finally:
        leave_budget(scope)
        reset_frame(frame)
    node.metrics["usage"] = dict(result.usage)
    # The summary is spent on this prompt's behalf: it counts in the prompt's usage.
    usage = enforcer.usage
    for key, value in result.usage.items():
        usage[key] = usage.get(key, 0) + value
    tree.end_node(node, NodeStatus.COMPLETED, output=summary, record_output=True)
    return summary


def _summarizer(enforcer: Enforcer, options: Summarizer) -> Any:
    chosen = options.model
    if chosen is not None and not isinstance(chosen, str):
        return chosen
    return Agent(
        name=f"{getattr(enforcer.agent, 'name', 'agent')}:summarizer",
        model=chosen or enforcer.model,
        system=SUMMARIZER_SYSTEM,
        max_tokens=min(2_048, enforcer.max_tokens),
        client=enforcer.client,
    )
