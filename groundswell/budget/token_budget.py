"""Token budgets: a cap on the input of every model turn, and the strategies that keep to it.

A `TokenBudget` caps the input of every model turn of an agent's loop at
``max_total - reserve_for_output`` tokens. Before each turn the request is
counted; above ``warning_threshold`` of that limit a ``budget_warning`` event
is recorded, and above the limit the budget's strategy makes the conversation
fit (a ``budget`` node records what it did) or raises
`TokenBudgetExceeded`.

The conversation of one prompt is the instruction (the first user turn) then
*turns*: an assistant message with the user message that answers it (its
tool results, or feedback). Strategies drop or summarize whole turns, so a
``tool_use`` never loses its ``tool_result`` and the request always starts
with the instruction, a user turn.

Requests are counted by a counter of `groundswell.budget.tokens`. This module holds
the budget itself and the strategies' pure parts; the ``budget`` middleware
(`groundswell.budget.middleware`) applies them before every model turn.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigurationError
from .pricing import Spend, enter_spend, leave_spend
from .summary import SUMMARIZER_SYSTEM, SUMMARY_TAG, Summarizer, content_blocks
from .tokens import COUNTER_ENV, Counter, known_counter

__all__ = [
    "ESSENTIAL",
    "PLAIN",
    "RETENTIONS",
    "STRATEGIES",
    # The summary's parts live in `groundswell.budget.summary`; these two are read from here too.
    "SUMMARIZER_SYSTEM",
    "SUMMARY_TAG",
    "WORDS",
    "Summarizer",
    "TokenBudget",
    "Turn",
    "breakdown",
    "check_budget",
    "check_retention",
    "current_budget",
    "enter_budget",
    "leave_budget",
    "prune_oldest",
    "resolve_budget",
    "sliding_window",
    "split_turns",
    "use_budget",
]

Strategy = Literal["sliding_window", "prune_oldest", "summarize", "fail"]
STRATEGIES: tuple[str, ...] = ("sliding_window", "prune_oldest", "summarize", "fail")
#: ``context_retention``: what of a continued conversation (``message_history``) is sent.
RETENTIONS: tuple[str, ...] = ("full", "output_only")


def check_retention(value: Any, owner: str) -> str | None:
    """``context_retention``: ``"full"``, ``"output_only"`` or ``None``; a clear error otherwise."""
    if value is None or value in RETENTIONS:
        return value  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"{owner}: context_retention must be 'full' (the whole message_history is sent) or "
        f"'output_only' (only its user turns and the model's answers), got {value!r:.40}"
    )


@dataclass(frozen=True, kw_only=True)
class TokenBudget:
    """A cap on the input tokens of every model turn, and what to do above it; or on
    what a run may spend, in USD; or both.

    ``max_total`` is the context the request may use in all; ``reserve_for_output``
    is kept free for the answer (``None``: the request's ``max_tokens``), so
    the input limit is ``max_total - reserve_for_output``. ``strategy`` is
    ``sliding_window``, ``prune_oldest``, ``summarize`` or ``fail``.
    ``warning_threshold`` is the fraction of the input limit at which a
    ``budget_warning`` event is recorded. ``per_step`` maps step names to the
    budget prompts inside that step use instead. ``summarizer`` (for
    ``summarize``) is an `Agent`, a model name (``None``: the calling agent's
    model) or a `Summarizer` (with ``target_size`` and ``preserve``; a dict of
    its fields is taken too). ``keep_last_turns`` is how many recent turns
    ``prune_oldest`` and ``summarize`` always keep. ``counter`` names a
    registered token counter (``None``: ``GROUNDSWELL_TOKEN_COUNTER``, else
    ``estimate``) or is a `Counter`.

    ``max_usd`` caps what the model calls in the budget's scope may cost, in
    USD (a workflow's budget: the whole run; a step's: that step, every
    attempt; an agent's or a prompt's: each prompt). Before each model turn,
    the spend so far plus the turn's input at the model's input price must
    stay within it, or `TokenBudgetExceeded` is raised; the last turn's
    output may pass it by at most ``max_tokens`` at the output price. Every
    workflow's and step's ``max_usd`` around a prompt holds, not only the
    most specific budget's. Give ``max_total``, ``max_usd`` or both.
    """

    max_total: int | None = None
    max_usd: float | None = None
    reserve_for_output: int | None = None
    strategy: Strategy = "sliding_window"
    warning_threshold: float = 0.8
    per_step: Mapping[str, TokenBudget] | None = None
    summarizer: Any = None
    keep_last_turns: int = 3
    counter: Any = None

    def __post_init__(self) -> None:
        def bad(what: str) -> ConfigurationError:
            return ConfigurationError(f"TokenBudget: {what}")

        if self.max_total is None and self.max_usd is None:
            raise bad(
                "give max_total (input tokens per model turn), max_usd (USD a run may "
                "spend) or both, e.g. TokenBudget(max_total=100_000) or TokenBudget(max_usd=0.50)"
            )
        if self.max_total is not None and (
            isinstance(self.max_total, bool) or not isinstance(self.max_total, int)
        ):
            raise bad(f"max_total must be an int (tokens), got {self.max_total!r}")
        if self.max_total is not None and self.max_total < 1:
            raise bad(f"max_total must be at least 1, got {self.max_total}")
        usd = self.max_usd
        if usd is not None and (
            isinstance(usd, bool)
            or not isinstance(usd, int | float)
            or not math.isfinite(usd)
            or usd <= 0
        ):
            raise bad(f"max_usd must be a number of US dollars > 0 (e.g. 0.50), got {usd!r}")
        reserve = self.reserve_for_output
        if reserve is not None and (
            isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0
        ):
            raise bad(f"reserve_for_output must be an int >= 0 or None, got {reserve!r}")
        if reserve is not None and self.max_total is not None and reserve >= self.max_total:
            raise bad(
                f"reserve_for_output ({reserve}) must be less than max_total ({self.max_total}); "
                "nothing would be left for the input"
            )
        if self.strategy not in STRATEGIES:
            raise bad(f"strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}")
        threshold = self.warning_threshold
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0 < threshold <= 1
        ):
            raise bad(f"warning_threshold must be a fraction in (0, 1], got {threshold!r}")
        if self.per_step is not None:
            if not isinstance(self.per_step, Mapping):
                raise bad(
                    f"per_step must map step names to TokenBudget, got {type(self.per_step).__name__}"
                )
            for step, inner in self.per_step.items():
                if not isinstance(step, str) or not isinstance(inner, TokenBudget):
                    raise bad(f"per_step[{step!r}] must be a TokenBudget keyed by a step name")
        keep = self.keep_last_turns
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise bad(f"keep_last_turns must be an int >= 1, got {keep!r}")
        summarizer = self.summarizer
        if isinstance(summarizer, Mapping):  # the fields of a Summarizer, as a config file has them
            unknown = sorted(set(map(str, summarizer)) - {"model", "target_size", "preserve"})
            if unknown:
                raise bad(
                    f"summarizer has unknown fields {', '.join(unknown)}; a Summarizer takes "
                    "model, target_size and preserve"
                )
            object.__setattr__(self, "summarizer", Summarizer(**summarizer))
        elif summarizer is not None and not (
            isinstance(summarizer, str | Summarizer) or hasattr(summarizer, "prompt")
        ):
            raise bad(
                "summarizer must be a groundswell.Agent, a model name or a groundswell.Summarizer, "
                f"got {type(summarizer).__name__}"
            )
        if self.counter is not None and not isinstance(self.counter, str | Counter):
            raise bad(
                "counter must be a registered counter name (e.g. 'estimate', 'anthropic') "
                f"or an object with async count(request), got {type(self.counter).__name__}"
            )
        # Without a counter of its own the budget counts with the process default:
        # a GROUNDSWELL_TOKEN_COUNTER naming nothing fails here, not at the first prompt.
        chosen = self.counter if self.counter is not None else os.environ.get(COUNTER_ENV)
        if isinstance(chosen, str) and chosen:
            names = known_counter(chosen)
            if names is not None:
                source = "" if self.counter is not None else f" ({COUNTER_ENV})"
                raise bad(
                    f"no token counter named {chosen!r}{source}; available: {names}. Install "
                    "or enable the plugin that provides it"
                )

    @property
    def summary(self) -> Summarizer:
        """The ``summarizer`` setting as a `Summarizer` (an Agent or a name is its ``model``)."""
        chosen = self.summarizer
        return chosen if isinstance(chosen, Summarizer) else Summarizer(model=chosen)

    def input_limit(self, max_tokens: int) -> int:
        """The most input tokens a request may have, for a request asking ``max_tokens``
        (``sys.maxsize`` for a budget without ``max_total``)."""
        if self.max_total is None:
            return sys.maxsize
        reserve = max_tokens if self.reserve_for_output is None else self.reserve_for_output
        return max(0, self.max_total - reserve)

    def no_room(self, max_tokens: int, owner: str) -> ConfigurationError:
        """The error for a budget that leaves no input room beside ``max_tokens``."""
        reserve = (
            f"reserve_for_output={self.reserve_for_output}"
            if self.reserve_for_output is not None
            else f"reserve_for_output (unset, so max_tokens={max_tokens})"
        )
        return ConfigurationError(
            f"{owner}: TokenBudget(max_total={self.max_total}) leaves no room for input once "
            f"{reserve} is kept free for the answer; raise max_total, or set a smaller "
            "reserve_for_output or max_tokens"
        )


# The budget of the step or workflow code runs in, with where it was set ("step" or
# "workflow"); set by ctx.step and Workflow.run.
_scope: ContextVar[tuple[TokenBudget, str] | None] = ContextVar(
    "groundswell_token_budget", default=None
)


def current_budget() -> tuple[TokenBudget, str] | None:
    """The budget of the step or workflow code runs in, with where it was set."""
    return _scope.get()


_Scoped = Token[tuple[TokenBudget, str] | None]
#: What `enter_budget` returns for `leave_budget`.
BudgetToken = _Scoped | tuple[_Scoped, Token[Spend | None]]


def enter_budget(budget: TokenBudget | None, where: str) -> BudgetToken:
    """Make ``budget`` (set on a ``"step"`` or ``"workflow"``) the one code runs in.

    ``None`` means no budget (e.g. for a summarizer's own prompt; what it
    spends still counts in the ``max_usd`` of the scopes around it). Pass
    the token to `leave_budget` when the scope ends.
    """
    scope = _scope.set((budget, where) if budget is not None else None)
    if budget is None or budget.max_usd is None:
        return scope
    return scope, enter_spend(budget, where)  # the spend of the scope, for max_usd


def leave_budget(token: BudgetToken) -> None:
    """End the scope `enter_budget` started."""
    if isinstance(token, tuple):
        leave_spend(token[1])
        token = token[0]
    _scope.reset(token)


@contextlib.contextmanager
def use_budget(
    budget: TokenBudget | None, where: Literal["step", "workflow"] = "step"
) -> Iterator[None]:
    """Run the block under ``budget``, as a step (or workflow) given ``budget=`` runs.

    The prompts of the block, and of the tasks it starts, keep to ``budget`` (its
    ``max_usd`` counts what they spend) unless one of them has its own. ``None`` runs
    the block under no budget at all. For code that starts work outside ``ctx.step``,
    such as a tool that runs a workflow and hands it the caller's budget::

        with groundswell.use_budget(TokenBudget(max_total=20_000)):
            await child.run()
    """
    token = enter_budget(budget, where)
    try:
        yield
    finally:
        leave_budget(token)


def resolve_budget(
    override: TokenBudget | None, own: TokenBudget | None, tree: Any, node: Any
) -> tuple[TokenBudget, str] | None:
    """The budget for one prompt and where it came from.

    Most specific first: the call's ``PromptOverrides``, the step's (its own or
    the enclosing budget's ``per_step`` entry), the agent's, the workflow's. A
    chosen budget's ``per_step`` entry for the nearest enclosing step that has
    one replaces it.
    """
    scope = _scope.get()
    if override is not None:
        chosen: tuple[TokenBudget, str] = (override, "prompt_overrides")
    elif scope is not None and scope[1] == "step":
        chosen = scope
    elif own is not None:
        chosen = (own, "agent")
    elif scope is not None:
        chosen = scope
    else:
        return None
    budget, source = chosen
    if budget.per_step:
        from ..tree.tree import NodeType

        current = node
        while current.parent_id is not None:
            current = tree.get_node(current.parent_id)
            if current.type is NodeType.STEP and current.name in budget.per_step:
                return budget.per_step[current.name], f"{source}.per_step[{current.name!r}]"
    return chosen


def check_budget(value: Any, owner: str) -> TokenBudget | None:
    """``value`` if it is a TokenBudget or None; a clear error otherwise."""
    if value is None or isinstance(value, TokenBudget):
        return value
    raise ConfigurationError(
        f"{owner}: token_budget must be a groundswell.TokenBudget, got {type(value).__name__}"
    )


# -- the conversation as turns -----------------------------------------------------------


#: How much ``prune_oldest`` wants to keep a turn, lowest pruned first: a plain turn
#: (tool calls and their results), one where the model said something in words, and
#: one with a failed tool call or an instruction given mid-run (feedback, a hook's
#: reason to go on), which the rest of the run depends on most.
PLAIN, WORDS, ESSENTIAL = 0, 1, 2


@dataclass(eq=False)
class Turn:
    """Messages ``start..end`` (exclusive) of a conversation: one assistant message and the
    user messages after it. Removing whole turns keeps tool_use/tool_result pairs together.
    ``rank`` is ``PLAIN``, ``WORDS`` or ``ESSENTIAL`` (see `prune_oldest`)."""

    start: int
    end: int
    tokens: int
    rank: int = PLAIN
    kinds: list[str] = field(default_factory=list)

    @property
    def critical(self) -> bool:
        """True when ``prune_oldest`` keeps the turn before plain ones (any rank above plain)."""
        return self.rank > PLAIN


def split_turns(
    messages: Sequence[Mapping[str, Any]],
    sizes: Sequence[int],
    # The last item is the message's rank (an int; Any keeps older memo annotations valid).
    memo: dict[int, tuple[Mapping[str, Any], list[str], Any]] | None = None,
) -> tuple[int, list[Turn]]:
    """``(head, turns)``: the head is the instruction (the messages before the first
    assistant message); each turn starts at an assistant message. ``memo`` keeps
    each message's description (its kinds and rank) between calls."""
    head = 0
    while head < len(messages) and messages[head].get("role") != "assistant":
        head += 1
    head = max(head, 1) if messages else 0
    turns: list[Turn] = []
    for i in range(head, len(messages)):
        message = messages[i]
        # An assistant message right after another (the continuation of a paused
        # turn) belongs to the same turn: it is never kept without what it continues.
        starts = message.get("role") == "assistant" and messages[i - 1].get("role") != "assistant"
        if starts or not turns:
            turns.append(Turn(i, i + 1, 0))
        else:
            turns[-1].end = i + 1
        turn = turns[-1]
        turn.tokens += sizes[i]
        known = memo.get(id(message)) if memo is not None else None
        if known is None or known[0] is not message:
            known = (message, *_describe(message))
            if memo is not None:
                memo[id(message)] = known
        turn.kinds.extend(known[1])
        turn.rank = max(turn.rank, known[2])
    return head, turns


def _describe(message: Mapping[str, Any]) -> tuple[list[str], int]:
    """What a message holds (for the budget node), and how much prune_oldest wants to
    keep its turn: ``ESSENTIAL`` for a failed tool call or a user's words inside a turn
    (feedback, a hook's reason to go on), ``WORDS`` for the model's own words, else
    ``PLAIN``."""
    kinds: list[str] = []
    rank = PLAIN
    role = message.get("role")
    for block in content_blocks(message):
        kind = block.get("type")
        if kind == "tool_use":
            kinds.append(f"tool_use:{block.get('name')}")
        elif kind == "tool_result":
            failed = bool(block.get("is_error"))
            kinds.append("tool_result:error" if failed else "tool_result")
            if failed:
                rank = ESSENTIAL
        elif kind == "text":
            kinds.append(f"{role}_text")
            if str(block.get("text", "")).strip():
                rank = max(rank, WORDS if role == "assistant" else ESSENTIAL)
        else:
            kinds.append(str(kind))
    return kinds, rank


def breakdown(
    system_tokens: int,
    tools_tokens: int,
    messages: Sequence[Mapping[str, Any]],
    sizes: Sequence[int],
    head: int,
) -> dict[str, int]:
    """Tokens per part of a request: system, tools, instruction, and the turns by kind."""
    parts = {
        "system": system_tokens,
        "tools": tools_tokens,
        "instruction": sum(sizes[:head]),
        "assistant": 0,
        "tool_results": 0,
        "user": 0,
    }
    for message, size in zip(messages[head:], sizes[head:], strict=True):
        if message.get("role") == "assistant":
            parts["assistant"] += size
        else:
            content = message.get("content")
            results = not isinstance(content, str) and any(
                isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content or ()
            )
            parts["tool_results" if results else "user"] += size
    return parts


def sliding_window(turns: Sequence[Turn], room: int) -> list[Turn]:
    """The most recent turns whose tokens fit in ``room`` (contiguous from the end)."""
    kept: list[Turn] = []
    used = 0
    for turn in reversed(turns):
        if used + turn.tokens > room:
            break
        kept.append(turn)
        used += turn.tokens
    kept.reverse()
    return kept


def prune_oldest(turns: Sequence[Turn], room: int, keep_last: int) -> list[Turn]:
    """Drop the oldest turns until the rest fit in ``room``, by rank: first plain turns,
    then turns where the model only said something in words, and only then turns with a
    failed tool call or an instruction given mid-run; oldest first within a rank. The
    last ``keep_last`` turns are never dropped here."""
    protected = len(turns) - keep_last  # turns from this index on are kept
    alive = [True] * len(turns)  # by position: turns compare by identity
    used = sum(t.tokens for t in turns)
    for rank in (PLAIN, WORDS, ESSENTIAL):
        for i, turn in enumerate(turns):
            if used <= room or i >= protected:
                break
            if turn.rank != rank:
                continue
            alive[i] = False
            used -= turn.tokens
    return [t for i, t in enumerate(turns) if alive[i]]
