"""What model calls cost, in USD: the price table, `set_prices`, and the spend of a run.

Every ``model_call`` node gets ``metrics["cost_usd"]``: its usage at the
model's prices, each kind of token at its own (input, output, cache reads,
and cache writes of a 5-minute or a 1-hour lifetime). The ``prompt``,
``step`` and ``workflow`` nodes above it add it to theirs, so a node's cost
is that of every model call below it in the tree. A model the table does
not know costs ``None`` (unknown, not free), and so does every node above it.

The table is the snapshot the ``genai-prices`` package ships, read on the
first call of each model and kept as per-token floats: a call then costs a
dict lookup and a few multiplications. Groundswell never asks genai-prices
to update it over the network. `set_prices` overrides a model's prices.

A budget with ``max_usd`` (see `groundswell.budget.token_budget`) counts the spend of its
scope here: a `Spend` per workflow or step that set one.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ..errors import ConfigurationError, TokenBudgetExceeded
from ..tree.node import EventNode, cache_share, metrics_of, own_metrics, payload_of, set_pricer

__all__ = [
    "BATCH_DISCOUNT",
    "LIVE_SPENDS",
    "SPEND",
    "DollarLimits",
    "Price",
    "Rates",
    "Spend",
    "cache_share",
    "charge",
    "current_spend",
    "enter_spend",
    "leave_spend",
    "price_of",
    "set_prices",
    "usage_cost",
]

logger = logging.getLogger("groundswell.budget.pricing")

#: What a call sent through the Message Batches API costs of the standard price (every
#: token kind: the discount stacks with prompt caching's).
BATCH_DISCOUNT = 0.5
# Anthropic's multipliers of the input price (docs: prompt caching, pricing).
CACHE_READ = 0.1
CACHE_WRITE_5M = 1.25
CACHE_WRITE_1H = 2.0
_PER_MILLION = 1_000_000


class Rates(NamedTuple):
    """USD per token (not per million: one multiplication per count)."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    cache_write_1h: float


@dataclass(frozen=True, slots=True)
class Price:
    """A model's rates; ``tiers`` are ``(start, rates)``, highest start first, that apply
    to the whole call once its input (cache reads and writes included) is above ``start``."""

    rates: Rates
    tiers: tuple[tuple[int, Rates], ...] = ()
    source: str = "genai-prices"

    def for_input(self, tokens: int) -> Rates:
        """The rates of a call with ``tokens`` input tokens in all."""
        for start, rates in self.tiers:
            if tokens > start:
                return rates
        return self.rates


_MISSING = object()
# model -> its price, or None once it was found unknown (and warned about).
_prices: dict[str, Price | None] = {}
_overrides: dict[str, Price] = {}
# One lock for the table and for adding costs up: sync steps run in worker threads.
_lock = threading.Lock()


def set_prices(
    model: str,
    *,
    input: float,
    output: float,
    cache_read: float | None = None,
    cache_write: float | None = None,
) -> None:
    """Use these prices (USD per million tokens) for ``model``, over the bundled table.

    ``model`` is the name as given to ``model=`` (matched exactly).
    ``cache_read`` defaults to 0.1x ``input`` and ``cache_write`` (a 5-minute
    cache write) to 1.25x; a 1-hour cache write costs 2x ``input``.
    Raises `ConfigurationError` for a bad name or price.
    """
    if not isinstance(model, str) or not model.strip():
        raise ConfigurationError(
            f"set_prices: model must be the model's name (e.g. 'claude-sonnet-4-5'), got {model!r}"
        )
    given = {"input": input, "output": output, "cache_read": cache_read, "cache_write": cache_write}
    for name, value in given.items():
        if value is None and name.startswith("cache"):
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ConfigurationError(
                f"set_prices({model!r}): {name} must be a price in USD per million tokens "
                f"(a finite number >= 0, e.g. {name}=3.0), got {value!r}"
            )
    per = float(_PER_MILLION)
    base = input / per
    rates = Rates(
        input=base,
        output=output / per,
        cache_read=base * CACHE_READ if cache_read is None else cache_read / per,
        cache_write=base * CACHE_WRITE_5M if cache_write is None else cache_write / per,
        cache_write_1h=base * CACHE_WRITE_1H,
    )
    with _lock:
        _overrides[model] = _prices[model] = Price(rates, source="set_prices")


def price_of(model: str) -> Price | None:
    """``model``'s price: `set_prices`' or the table's; ``None`` (warned once) if unknown."""
    found = _prices.get(model, _MISSING)
    if found is _MISSING:
        return _resolve(model)
    return found  # type: ignore[return-value]


def _resolve(model: str) -> Price | None:
    with _lock:
        if model in _prices:  # another thread got there first
            return _prices[model]
        price = _overrides.get(model) or _from_table(model)
        _prices[model] = price
    if price is None:
        logger.warning(
            "no price known for model %r: its cost_usd is None (unknown). Give its prices "
            "with groundswell.set_prices(%r, input=..., output=...) in USD per million tokens",
            model,
            model,
        )
    return price


def _from_table(model: str) -> Price | None:
    try:
        # Imported here: its table takes a tenth of a second to load, on the first call only.
        from genai_prices.data_snapshot import get_snapshot
    except ImportError:  # pragma: no cover - a core dependency; only a broken install lacks it
        logger.warning(
            "genai-prices is not installed (pip install genai-prices): costs are unknown"
        )
        return None
    try:
        # The bundled snapshot (or one the application itself chose to update).
        _, info = get_snapshot().find_provider_model(model, None, "anthropic", None)
    except LookupError:
        return None
    return _price(info.get_prices(datetime.now(UTC)))


def _price(table: Any) -> Price | None:
    """A genai-prices ``ModelPrice`` as our per-token `Price` (tiers resolved once)."""
    keys = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")
    values: list[Any] = [getattr(table, key, None) for key in (*keys, "cache_write_1h_mtok")]
    if values[0] is None or values[1] is None:
        return None
    starts = sorted({t.start for v in values if hasattr(v, "tiers") for t in v.tiers})

    def rates(tokens: int) -> Rates:
        at = [_at(v, tokens) for v in values]
        base = at[0]
        assert base is not None and at[1] is not None
        return Rates(
            input=base,
            output=at[1],
            cache_read=base * CACHE_READ if at[2] is None else at[2],
            cache_write=base * CACHE_WRITE_5M if at[3] is None else at[3],
            cache_write_1h=base * CACHE_WRITE_1H if at[4] is None else at[4],
        )

    tiers = tuple((start, rates(start + 1)) for start in reversed(starts))
    return Price(rates(0), tiers)


def _at(value: Any, tokens: int) -> float | None:
    """One genai-prices price (a Decimal, or tiered) per token for ``tokens`` input tokens."""
    if value is None:
        return None
    if hasattr(value, "tiers"):
        chosen = value.base
        for tier in sorted(value.tiers, key=lambda t: t.start, reverse=True):
            if tokens > tier.start:
                chosen = tier.price
                break
        value = chosen
    return float(value) / _PER_MILLION


def usage_cost(price: Price, usage: Mapping[str, int], reported: Any = None) -> float:
    """What ``usage`` (the API's token counts) costs at ``price``, in USD.

    ``reported`` is the API's usage object; its ``cache_creation`` split of
    cache writes into 5-minute and 1-hour ones is used when present (else
    every write counts as a 5-minute one).
    """
    get = usage.get
    fresh, out = get("input_tokens", 0), get("output_tokens", 0)
    read, write = get("cache_read_input_tokens", 0), get("cache_creation_input_tokens", 0)
    rates = price.for_input(fresh + read + write) if price.tiers else price.rates
    per_input, per_output, per_read, per_write, per_hour_write = rates
    cost = fresh * per_input + out * per_output
    if read:
        cost += read * per_read
    if write:
        split = getattr(reported, "cache_creation", None)
        hour = getattr(split, "ephemeral_1h_input_tokens", None) if split is not None else None
        long = hour if isinstance(hour, int) and 0 < hour <= write else 0
        cost += (write - long) * per_write + long * per_hour_write
    return cost


#: The ids of the `Spend` objects alive. While there are none, no context anywhere can
#: hold one (a task outliving its scope keeps its `Spend` alive, and so counted), and the
#: agent loop skips reading `SPEND` on every model turn. Set operations are atomic.
LIVE_SPENDS: set[int] = set()


class Spend:
    """What the model calls inside one budget's scope have cost so far.

    Scopes nest (a step's inside its workflow's): a call adds to its scope and
    every one around it. ``where`` is ``"workflow"`` or ``"step"``; ``unpriced``
    names models called there without a price.
    """

    __slots__ = ("budget", "outer", "unpriced", "usd", "warned", "where")

    def __init__(self, budget: Any, where: str, outer: Spend | None) -> None:
        self.budget = budget
        self.where = where
        self.outer = outer
        self.usd = 0.0
        self.unpriced: set[str] = set()
        self.warned = False
        LIVE_SPENDS.add(id(self))

    # The set is bound here: at interpreter exit the module's globals may be gone first.
    def __del__(self, _live: set[int] = LIVE_SPENDS) -> None:
        _live.discard(id(self))  # gone from every context: none can read it any more


_spend: ContextVar[Spend | None] = ContextVar("groundswell_spend", default=None)
#: The dollar budgets counting here (``SPEND.get()`` is None when none is): read by the
#: agent loop before it calls `charge`, which a call with no budget and no cache write skips.
SPEND = _spend


def current_spend(budget: Any = None) -> Spend | None:
    """The innermost spend scope, or (given ``budget``) the one that budget started."""
    spend = _spend.get()
    if budget is None:
        return spend
    while spend is not None and spend.budget is not budget:
        spend = spend.outer
    return spend


def enter_spend(budget: Any, where: str) -> Token[Spend | None]:
    """Start counting spend for ``budget``, set on a ``where`` (inside the current scope);
    see `leave_spend`."""
    return _spend.set(Spend(budget, where, _spend.get()))


def leave_spend(token: Token[Spend | None]) -> None:
    """End the scope `enter_spend` started."""
    _spend.reset(token)


class DollarLimits:
    """The ``max_usd`` limits one prompt must keep, checked before each model turn.

    Every workflow's and step's budget around the prompt with a ``max_usd``
    counts the spend of its whole scope (its `Spend`), and all of them hold,
    not only the innermost; the prompt's own budget (an agent's or a call's),
    when it is not one of those, counts what this prompt has cost.
    """

    def __init__(self, budget: Any, source: str, agent: str, tree: Any, node: EventNode) -> None:
        self.budget, self.source, self.agent = budget, source, agent
        self.tree, self.node = tree, node
        self.scopes: list[Spend] = []
        spend = _spend.get()
        while spend is not None:
            self.scopes.append(spend)
            spend = spend.outer
        self.own = budget.max_usd is not None and all(s.budget is not budget for s in self.scopes)
        self.active = self.own or bool(self.scopes)
        self.warned = False
        #: What this prompt's earlier attempts cost (the own limit is per prompt).
        self.earlier = 0.0

    def check(self, model: str, tokens: int) -> float:
        """The innermost limit's spend so far; raises `TokenBudgetExceeded` when that
        plus ``tokens`` input tokens at ``model``'s input price would pass any limit,
        and `ConfigurationError` when a price is unknown."""
        price = price_of(model)
        # (spent, limit, where it was set, its Spend), innermost first.
        limits: list[tuple[float | None, float, str, Spend | None]] = []
        if self.own:
            spent = metrics_of(self.node).get("cost_usd", 0.0)
            if spent is not None:
                spent += self.earlier
            limits.append((spent, self.budget.max_usd, self.source, None))
        for scope in self.scopes:
            usd = None if scope.unpriced else scope.usd
            limits.append((usd, scope.budget.max_usd, scope.where, scope))
        unknown = model if price is None else None
        for spent, _, _, counted in limits:
            if unknown is None and spent is None:
                unknown = sorted(counted.unpriced)[0] if counted is not None else model
        if unknown is not None or price is None:
            unknown = unknown or model
            raise ConfigurationError(
                f"agent {self.agent!r}: a TokenBudget's max_usd cannot be kept: the price "
                f"table does not know model {unknown!r}; give its prices with "
                f"groundswell.set_prices({unknown!r}, input=..., output=...) in USD per "
                "million tokens"
            )
        upcoming = tokens * price.for_input(tokens).input
        for spent, limit, where, counted in limits:
            assert spent is not None
            if spent + upcoming > limit:
                raise self._exceeded(spent, limit, where, tokens, upcoming, model)
            budget = counted.budget if counted is not None else self.budget
            warned = counted.warned if counted is not None else self.warned
            if spent + upcoming >= budget.warning_threshold * limit and not warned:
                if counted is not None:
                    counted.warned = True
                else:
                    self.warned = True
                self.tree.add_event(
                    self.node,
                    "budget_usd_warning",
                    spent_usd=spent,
                    next_usd=upcoming,
                    max_usd=limit,
                    source=where,
                    threshold=budget.warning_threshold,
                )
        spent = limits[0][0]
        assert spent is not None
        return spent

    def _exceeded(
        self, spent: float, limit: float, where: str, tokens: int, upcoming: float, model: str
    ) -> TokenBudgetExceeded:
        scope = where.split(".", 1)[0]
        whose = {"workflow": "the workflow run", "step": "the step"}.get(scope, "the prompt")
        return TokenBudgetExceeded(
            f"agent {self.agent!r}: {whose} has spent ${spent:.6f} of "
            f"TokenBudget(max_usd={limit}) (set on the {scope}), and the next model turn's "
            f"{tokens} input tokens would cost ${upcoming:.6f} more at the input price of "
            f"{model!r}, passing the limit. To fix: raise max_usd, use a cheaper model, or "
            "send less per turn (a max_total that trims the conversation, fewer tools, "
            "shorter tool results)",
            breakdown={"total": tokens},
            spent_usd=spent,
            max_usd=limit,
        )


def charge(node: EventNode, model: str, usage: Mapping[str, int], reported: Any) -> None:
    """Price the model call ``node`` now when it cannot wait: a dollar budget is
    counting (`enter_spend`), or it wrote to the prompt cache (the reply's split of
    5-minute and 1-hour writes is not kept). Otherwise it is priced from its usage
    when its metrics are first read (`groundswell.tree.node.metrics_of`), so a run nobody
    reads costs from never prices a call."""
    spend = _spend.get()
    if spend is None and not usage.get("cache_creation_input_tokens"):
        return
    cost = _cost(model, usage, reported)
    if cost is not None and "batch" in payload_of(node):
        cost *= BATCH_DISCOUNT
    own_metrics(node)["cost_usd"] = cost
    if spend is not None:
        with _lock:
            while spend is not None:
                if cost is None:
                    spend.unpriced.add(model)
                else:
                    spend.usd += cost
                spend = spend.outer


def _cost(model: str, usage: Mapping[str, int], reported: Any = None) -> float | None:
    price = _prices.get(model, _MISSING)
    if price is _MISSING:
        price = _resolve(model)
    return None if price is None else usage_cost(price, usage, reported)  # type: ignore[arg-type]


def _price_node(node: EventNode, metrics: dict[str, Any]) -> None:
    """Set ``metrics["cost_usd"]`` of the model call ``node`` from its usage (the
    price of its model: the node's name)."""
    usage = metrics.get("usage")
    if isinstance(usage, Mapping) and usage:
        cost = _cost(node.name, usage)
        if cost is not None and "batch" in payload_of(node):  # sent in a Message Batch
            cost *= BATCH_DISCOUNT
        metrics["cost_usd"] = cost


set_pricer(_price_node)
