"""``token_budget=TokenBudget(...)``: every model turn's input kept within the budget.

The budget is the innermost one in force (overrides, step, agent, workflow;
see `groundswell.budget.token_budget.resolve_budget`); before each model turn the request
is counted and, above the limit, made to fit by the budget's strategy.

A prompt that continues a conversation (``message_history``) sends that
history before its instruction. The history counts like everything else, and
its turns (a user turn with the model's reply, and the tool calls it took) are
dropped or summarized by the strategies like the prompt's own turns, oldest
first; the instruction itself is never dropped, and what is left of the
history still starts with a user turn.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun
from ..errors import TokenBudgetExceeded
from ..hooks.runner import pre_compact_hook
from ..model.output_types import output_type
from ..model.thinking_blocks import drop_stale_thinking, pinned_thinking
from ..tree.tree import NodeStatus, NodeType
from .pricing import DollarLimits
from .summarize import summarize
from .token_budget import (
    PLAIN,
    TokenBudget,
    Turn,
    breakdown,
    current_budget,
    prune_oldest,
    resolve_budget,
    sliding_window,
    split_turns,
)
from .tokens import (
    COUNTER_ENV,
    CountRequest,
    EstimateCounter,
    estimate_message,
    estimate_tokens,
    get_counter,
    system_tokens,
    tools_tokens,
)

__all__ = ["Budget", "Enforcer"]

_KEY = "budget.enforcer"
_ATTEMPTS = "budget_attempts"


class Budget(Middleware):
    """Check (and trim, summarize or refuse) each request against the token budget."""

    name = "budget"
    order = 260

    def active(self, run: PromptRun) -> bool:
        return run.settings.get("token_budget") is not None or current_budget() is not None

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        chosen = resolve_budget(
            run.overrides.token_budget, run.agent.config["token_budget"], run.tree, run.node
        )
        run.scratch[_KEY] = None
        # Every attempt's prompt node, so a dollar limit counts what earlier attempts
        # (a reflection's retries) cost too: it is per prompt, not per attempt.
        attempts: list[Any] = run.scratch.setdefault(_ATTEMPTS, [])
        earlier = sum(n.metrics.get("cost_usd") or 0.0 for n in attempts if n is not run.node)
        if run.node not in attempts:
            attempts.append(run.node)
        if chosen is not None:
            run.scratch[_KEY] = Enforcer(
                chosen[0],
                source=chosen[1],
                usage=run.usage,
                schema=run.prompt.response_format,
                tree=run.tree,
                node=run.node,
                agent=run.agent,
                client=run.client,
                model=run.settings["model"],
                max_tokens=run.settings["max_tokens"],
                before_compact=pre_compact_hook(run.scratch),
            )
            run.scratch[_KEY].dollars.earlier = earlier
        return await call_next()

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        enforcer: Enforcer | None = run.scratch.get(_KEY)
        if enforcer is not None and enforcer.budget.max_total is not None:
            # Trims the conversation itself (request["messages"] is it), so later
            # turns build on what was kept.
            history = run.history
            messages = request["messages"]
            left = await enforcer.check(
                messages,
                request.get("system"),
                request.get("tools", []),
                len(history),
                betas=request.get("betas") or (),
                mcp_servers=request.get("mcp_servers") or (),
            )
            if history and left is not None:
                # With a history the request's list is a new one: keep what it kept.
                history[:] = messages[:left]
                run.messages[:] = messages[left:]
        if enforcer is not None and enforcer.dollars.active:
            # After any trimming (and summary, which spends too): what is sent now.
            await enforcer.check_spend(request)
        return request


class Enforcer:
    """Checks one prompt's requests against its budget before every model turn."""

    def __init__(
        self,
        budget: TokenBudget,
        *,
        source: str,
        usage: dict[str, int],
        schema: Any,
        tree: Any,
        node: Any,
        agent: Any,
        client: Any,
        model: str,
        max_tokens: int,
        before_compact: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self.budget = budget
        #: The prompt's ``PreCompact`` hooks: the reason when one blocks compaction.
        self.before_compact = before_compact
        self.limit = budget.input_limit(max_tokens)
        if self.limit <= 0:
            raise budget.no_room(max_tokens, f"agent {getattr(agent, 'name', '?')!r}")
        self.counter = get_counter(budget.counter)
        self.exact = not isinstance(self.counter, EstimateCounter)
        self.counter_name = (
            budget.counter
            if isinstance(budget.counter, str)
            else type(budget.counter).__name__
            if budget.counter is not None
            else os.environ.get(COUNTER_ENV) or "estimate"
        )
        self.tree, self.node, self.agent, self.client = tree, node, agent, client
        self.usage = usage
        self.model = model
        self.max_tokens = max_tokens
        self.reserve = (
            max_tokens if budget.reserve_for_output is None else budget.reserve_for_output
        )
        # The response schema travels with every request (output_config).
        self.schema_tokens = estimate_tokens(_schema_of(schema)) if schema is not None else 0
        self.warned = False
        self.summarizer_failed = False
        self.stats: dict[str, Any] = {"source": source}
        if budget.max_total is not None:
            self.stats.update(
                limit=self.limit,
                checks=0,
                enforcements=0,
                peak_tokens=0,
                threshold=budget.warning_threshold,
            )
        node.metrics["budget"] = self.stats
        # Every max_usd in force: this budget's, and each workflow's or step's around.
        self.dollars = DollarLimits(budget, source, getattr(agent, "name", "?"), tree, node)
        if budget.max_usd is not None:
            self.stats["max_usd"] = budget.max_usd
        # Message dicts are never changed once in the conversation, so their
        # estimates are kept by identity (the dict is held, so the id stays valid).
        self._sizes: dict[int, tuple[Mapping[str, Any], int]] = {}
        self._described: dict[int, tuple[Mapping[str, Any], list[str], bool]] = {}

    def _size(self, message: Mapping[str, Any]) -> int:
        known = self._sizes.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        size = estimate_message(message)
        self._sizes[id(message)] = (message, size)
        return size

    async def check(
        self,
        messages: list[dict[str, Any]],
        system: Any,
        tools: Sequence[Mapping[str, Any]],
        history: int = 0,
        *,
        betas: Sequence[str] = (),
        mcp_servers: Sequence[Mapping[str, Any]] = (),
    ) -> int | None:
        """Record a warning, or make ``messages`` fit (in place), or raise
        `TokenBudgetExceeded`. The first ``history`` messages are the earlier
        conversation the prompt continues; returns how many of them are left
        after making the request fit, or ``None`` when ``messages`` were left as
        they were."""
        sizes = [self._size(m) for m in messages]
        fixed = system_tokens(system), tools_tokens(tools) + self.schema_tokens
        estimate = fixed[0] + fixed[1] + sum(sizes)
        total = await self._count(messages, system, tools, estimate, betas, mcp_servers)
        self.stats["checks"] += 1
        self.stats["last_tokens"] = total
        self.stats["peak_tokens"] = peak = max(self.stats["peak_tokens"], total)
        # The gauge (`render()`): the peak's share of the limit, and its state.
        self.stats["used"] = round(peak / self.limit, 4)
        warn = self.budget.warning_threshold * self.limit
        self.stats["state"] = "over" if peak > self.limit else "warning" if peak >= warn else "ok"
        if total <= self.limit:
            threshold = self.budget.warning_threshold * self.limit
            if total >= threshold and not self.warned:
                self.warned = True
                self.tree.add_event(
                    self.node,
                    "budget_warning",
                    tokens=total,
                    limit=self.limit,
                    threshold=self.budget.warning_threshold,
                    used=round(total / self.limit, 4),
                )
            return None
        # Per-part figures come from the estimator, scaled to the counter's total
        # when the counter is exact, so they add up to what was counted.
        scale = total / estimate if estimate else 1.0
        scaled = [max(1, round(s * scale)) for s in sizes]
        fixed = round(fixed[0] * scale), round(fixed[1] * scale)
        left = await self._enforce(messages, scaled, fixed, total, history)
        self.warned = False  # the next crossing of the threshold is news again
        return left

    async def check_spend(self, request: dict[str, Any]) -> None:
        """Raise `TokenBudgetExceeded` when this request would pass a ``max_usd``
        (see `groundswell.budget.pricing.DollarLimits`)."""
        if self.budget.max_total is not None:
            tokens = int(self.stats["last_tokens"])  # counted (and fitted) just before
        else:
            tokens = await self._measure(request)
        model = str(request.get("model") or self.model)
        self.stats["spent_usd"] = self.dollars.check(model, tokens)

    async def _measure(self, request: dict[str, Any]) -> int:
        """The request's input tokens, counted as `check` counts them."""
        messages, system = request["messages"], request.get("system")
        tools = request.get("tools") or []
        estimate = (
            system_tokens(system)
            + tools_tokens(tools)
            + self.schema_tokens
            + sum(self._size(m) for m in messages)
        )
        betas, servers = request.get("betas") or (), request.get("mcp_servers") or ()
        return await self._count(messages, system, tools, estimate, betas, servers)

    async def _count(
        self,
        messages: list[dict[str, Any]],
        system: Any,
        tools: Sequence[Mapping[str, Any]],
        estimate: int,
        betas: Sequence[str],
        mcp_servers: Sequence[Mapping[str, Any]],
    ) -> int:
        if not self.exact:
            return estimate
        request = CountRequest(
            self.model, messages, system, list(tools), self.client, betas, mcp_servers
        )
        try:
            return int(await self.counter.count(request))
        except Exception as exc:  # a counter outage must not stop the run: estimate instead
            self.tree.add_event(
                self.node,
                "budget_counter_error",
                counter=self.counter_name,
                error=f"{type(exc).__name__}: {exc}",
                fallback="estimate",
            )
            return estimate

    async def _enforce(
        self,
        messages: list[dict[str, Any]],
        sizes: list[int],
        fixed: tuple[int, int],
        total: int,
        history: int,
    ) -> int:
        budget, tree = self.budget, self.tree
        self.stats["enforcements"] += 1
        if history:
            # The instruction is messages[history:head]; the history's turns come first.
            own, own_sizes = messages[history:], sizes[history:]
            head, turns = split_turns(own, own_sizes, self._described)
            parts = breakdown(fixed[0], fixed[1], own, own_sizes, head)
            parts["history"] = sum(sizes[:history])
            for turn in turns:
                turn.start, turn.end = turn.start + history, turn.end + history
            head += history
            candidates = [*self._history_turns(messages, sizes, history), *turns]
        else:
            head, turns = split_turns(messages, sizes, self._described)
            parts = breakdown(fixed[0], fixed[1], messages, sizes, head)
            candidates = turns
        node = tree.start_node(
            NodeType.BUDGET,
            budget.strategy,
            self.node,
            payload={
                "strategy": budget.strategy,
                "source": self.stats["source"],
                "counter": self.counter_name,
                "limit": self.limit,
                "max_total": budget.max_total,
                "reserve_for_output": self.reserve,
                "breakdown": parts,
            },
            trusted=True,
        )
        node.metrics["tokens_before"] = total
        try:
            room = self.limit - fixed[0] - fixed[1] - parts["instruction"]
            if budget.strategy == "fail":
                raise self._exceeded(parts, total, None)
            # Every strategy makes room before the latest turn; while that turn's tool
            # calls are answered, its thinking forbids any change there (thinking_blocks).
            pinned = pinned_thinking(messages)
            if pinned is not None:
                raise self._pinned(parts, total, pinned)
            if self.before_compact is not None:
                refused = await self.before_compact()
                if refused is not None:
                    node.payload["blocked_by"] = "PreCompact"
                    raise self._compaction_blocked(parts, total, refused)
            before = list(messages)  # as it was: _summarize rewrites the instruction in place
            if budget.strategy == "sliding_window":
                kept = sliding_window(candidates, room)
            elif budget.strategy == "prune_oldest":
                kept = prune_oldest(candidates, room, budget.keep_last_turns)
            else:
                kept, head_size = await summarize(
                    self, messages, sizes, (history, head), candidates, room, node
                )
                room = self.limit - fixed[0] - fixed[1] - head_size
            used = sum(t.tokens for t in kept)
            # The latest of the prompt's own turns must stay (a history turn need not).
            if (turns and (not kept or kept[-1] is not turns[-1])) or used > room:
                raise self._exceeded(parts, total, budget.strategy)
            alive = {id(t) for t in kept}
            removed = [t for t in candidates if id(t) not in alive]
            earlier = [m for t in kept if t.start < history for m in messages[t.start : t.end]]
            keep = [
                *earlier,
                *messages[history:head],
                *(m for t in kept if t.start >= history for m in messages[t.start : t.end]),
            ]
            after = self.limit - room + used
            node.payload["removed"] = [
                {"messages": [t.start, t.end], "tokens": t.tokens, "kinds": t.kinds}
                for t in removed
            ]
            node.payload["kept_turns"] = len(kept)
            # The thinking after the first change is void now: it goes (thinking_blocks).
            keep, kept_history = drop_stale_thinking(before, keep, len(earlier))
            messages[:] = keep
        except TokenBudgetExceeded as exc:
            tree.end_node(node, NodeStatus.FAILED, error=exc)
            raise
        except BaseException as exc:
            tree.end_node_after(node, exc)
            raise
        node.metrics["tokens_after"] = after
        self.stats["last_tokens"] = after
        tree.end_node(node, NodeStatus.COMPLETED)
        return kept_history

    def _history_turns(
        self, messages: list[dict[str, Any]], sizes: list[int], count: int
    ) -> list[Turn]:
        """The history (``messages[:count]``) as turns that each start at a user turn
        answering no tool call: that turn, the model's reply and the tool calls it
        took. Dropping the oldest leaves a history that still starts with a user turn."""
        starts = [
            i
            for i in range(count)
            if messages[i].get("role") == "user" and not _answers_tools(messages[i])
        ]
        if not starts or starts[0] != 0:
            starts.insert(0, 0)
        found: list[Turn] = []
        for start, end in zip(starts, [*starts[1:], count], strict=True):
            # The messages after the user turn are described as the prompt's own turns are.
            _, inner = split_turns(messages[start:end], sizes[start:end], self._described)
            found.append(
                Turn(
                    start,
                    end,
                    sum(sizes[start:end]),
                    rank=max((t.rank for t in inner), default=PLAIN),
                    kinds=["history", "user_text", *(k for t in inner for k in t.kinds)],
                )
            )
        return found

    def _exceeded(self, parts: dict[str, int], total: int, strategy: str | None) -> Exception:
        detail = {**parts, "total": total, "limit": self.limit}
        largest = max(parts, key=lambda k: parts[k])
        budget = self.budget
        history = "history" in parts
        budget_text = (
            f"the {self.limit}-token input limit (max_total={budget.max_total} - "
            f"reserve_for_output={self.reserve})"
        )
        if strategy is None:
            why = f"the request needs {total} input tokens, over {budget_text}"
        else:
            must = "the instruction" + (
                " and the latest turn" if parts["assistant"] or parts["tool_results"] else ""
            )
            if strategy == "prune_oldest":
                must = (
                    f"the instruction and the last {budget.keep_last_turns} turns it keeps "
                    "(keep_last_turns)"
                )
            if history:
                must += " (earlier turns of the message_history may go)"
            why = f"{strategy} cannot make the request fit: {must} alone exceed {budget_text}"
        advice = ["raise max_total", "reserve less for the output (or lower max_tokens)"]
        if strategy is None:
            advice.append(
                "use a strategy that removes turns (sliding_window, prune_oldest, summarize)"
            )
        if largest == "tools":
            advice.append("send fewer or shorter tool definitions")
        elif largest == "tool_results":
            advice.append("have the tools return less (one result cannot be cut)")
        elif largest in ("instruction", "system"):
            advice.append(f"shorten the {largest}")
        elif largest == "history":
            advice.append("continue from a shorter message_history")
        return TokenBudgetExceeded(
            f"agent {getattr(self.agent, 'name', '?')!r}: {why}; largest part: {largest} "
            f"({parts[largest]} tokens). To fix: {', or '.join(advice)}",
            breakdown=detail,
        )

    def _compaction_blocked(
        self, parts: dict[str, int], total: int, reason: str
    ) -> TokenBudgetExceeded:
        """The refusal when a ``PreCompact`` hook blocks the strategy from compacting."""
        return TokenBudgetExceeded(
            f"agent {getattr(self.agent, 'name', '?')!r}: the request needs {total} input "
            f"tokens, over the {self.limit}-token input limit, and a PreCompact hook blocked "
            f"{self.budget.strategy} from making it fit: {reason}. To fix: let the hook allow "
            "compaction, or raise max_total",
            breakdown={**parts, "total": total, "limit": self.limit},
        )

    def _pinned(self, parts: dict[str, int], total: int, pinned: int) -> TokenBudgetExceeded:
        """The refusal to cut into a tool loop whose latest turn holds thinking blocks.

        A `TokenBudgetExceeded`, not a `ConfigurationError`: the settings are
        valid, it is this conversation that outgrew the budget at a point where
        the API allows no cut, and code that handles budget overruns already
        catches this error (with its ``breakdown``).
        """
        budget = self.budget
        return TokenBudgetExceeded(
            f"agent {getattr(self.agent, 'name', '?')!r}: the request needs {total} input "
            f"tokens, over the {self.limit}-token input limit (max_total={budget.max_total} - "
            f"reserve_for_output={self.reserve}), and {budget.strategy} may not make it fit: "
            f"the model's latest turn (messages[{pinned}]) holds thinking blocks and its tool "
            "calls are being answered, so the API takes it back only with its thinking and "
            "everything before it unchanged (it refuses the request otherwise). To fix: raise "
            "max_total, or reserve less for the output (or lower max_tokens), or have the "
            "tools return less, or continue from a shorter message_history; strategies make "
            "room again once the tool loop has ended",
            breakdown={**parts, "total": total, "limit": self.limit},
        )


def _answers_tools(message: Mapping[str, Any]) -> bool:
    """True for a user turn that holds tool results (it cannot start a conversation)."""
    content = message.get("content")
    return not isinstance(content, str) and any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content or ()
    )


def _schema_of(response_format: Any) -> Any:
    try:
        # The schema actually sent, for every output type (not only models).
        return output_type(response_format).schema
    except Exception:  # an odd type: its schema is counted as nothing
        return None
